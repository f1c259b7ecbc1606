"""Deployment tooling: putting speakwire (or a compatible image) behind a managed endpoint.

Each target lives in its own package (``sagemaker/``); nothing here is imported by the
server, so the AWS SDKs stay an optional extra.
"""
