"""Amazon SageMaker AI: deploy, smoke-test, invoke, inspect and delete a TTS endpoint.

One idea per module:

- ``settings``: what the user asked for, validated before any AWS call;
- ``requests``: settings → the exact SageMaker / Application Auto Scaling request dicts;
- ``deploy``, ``delete``, ``status``, ``invoke``: the calls, on boto3 clients passed in
  (so every one is testable with botocore's ``Stubber``); ``progress`` prints waiter polls
  and ``aws_errors`` tells "not found" from real failures;
- ``smoke``: the streaming check over any :class:`~speakwire.client.transport.StreamTransport`;
- ``bidi`` / ``bidi_frames``: that transport over SageMaker's bidirectional stream, and the
  pure payload-part ↔ message mapping under it;
- ``reference_audio`` / ``speech_response``: the audio going into and coming out of ``invoke``.
- ``build_context`` (pure: the files a Dockerfile copies, zipped deterministically, and the tag hashed from them),
  ``build_requests`` (the CodeBuild/ECR/S3 requests and the inline buildspec), ``build_progress`` (phase lines and
  the log tail) and ``build`` (the CodeBuild flow of ``speakwire sagemaker build``);
- ``capacity_probe``: the capacity a running image reports in ``/ready``, read through ``InvokeEndpoint``, for the
  autoscaling target.
- ``local_runtime``: a local stand-in for the SageMaker runtime's REST API (``speakwire sagemaker local``),
  over ``event_stream`` (the response stream's binary framing) and ``runtime_errors`` (its error replies).

Nothing here is imported by the server; boto3 is the ``[sagemaker]`` extra and the
bidirectional client the ``[sagemaker-bidi]`` extra (Python ≥ 3.12).
"""
