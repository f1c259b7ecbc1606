"""Amazon SageMaker AI: deploy, smoke-test, invoke, inspect and delete a TTS endpoint.

The modules split by idea: ``settings`` validates what the user asked for before any
AWS call, ``requests`` turns settings into the exact API request dicts, ``deploy``,
``delete``, ``status`` and ``invoke`` make the calls, ``smoke`` checks a live stream
over any :class:`~voxserve.client.transport.StreamTransport`, and ``bidi`` provides that
transport over SageMaker's bidirectional stream. boto3 clients are passed in, so every
AWS-side module is testable with botocore's ``Stubber`` and imports no SDK itself.
"""
