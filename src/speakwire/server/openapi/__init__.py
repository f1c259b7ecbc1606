"""The OpenAPI document: what each route takes and answers, in each dialect's shapes (``responses``, ``bodies``)."""
