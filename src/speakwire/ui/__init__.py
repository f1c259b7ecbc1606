"""The Gradio client: type text, hear it stream from a speakwire server or a SageMaker endpoint.

``backend`` holds everything that talks to the speech service and needs no Gradio;
``app`` lays out the page. Gradio is the ``[ui]`` extra, imported only by ``app``.
"""
