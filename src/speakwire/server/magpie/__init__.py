"""NVIDIA Magpie TTS (NIM): the realtime synthesis protocol on SageMaker's default bidirectional path and the
SageMaker ``/invocations`` JSON body, for pipecat's NVIDIA SageMaker services."""
