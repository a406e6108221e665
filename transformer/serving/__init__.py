"""A trained run over HTTP (`transformer-serve RUN`, `transformer.cli.serve`), on Starlette and uvicorn.

- `limits`: what one request may ask (`Limits`) and the strict reading of its body;
- `batcher`: the decoder thread, which decodes the requests that go together
  in one engine call;
- `app`: the ASGI application, its endpoints, checks and answers;
- `schema`: its OpenAPI schema; `metrics`: its Prometheus metrics;
- `server`: running it on uvicorn.

`app`, `schema`, `metrics` and `server` need the optional extra `serve`
(`pip install '.[serve]'`: starlette, uvicorn, httptools, prometheus-client)
and are imported by name (`from transformer.serving.app import create_app`);
this package's own names, the limits and the batcher, are standard library
only. docs/serving.md describes the API, its limits and errors, and how to
run it.
"""

from transformer.serving.batcher import Batcher, Busy, Stopping
from transformer.serving.limits import Limits, RequestError, parse_request, request_search

__all__ = ["Batcher", "Busy", "Limits", "RequestError", "Stopping", "parse_request",
           "request_search"]
