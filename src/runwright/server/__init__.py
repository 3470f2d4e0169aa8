"""`runwright server`: the HTTP API of a shared deployment (FastAPI on uvicorn), with the
controller running beside it on the same store (docs/server.md).

Thin, as every face is: a route parses the request, authenticates it into an `Actor`, calls one
method of `runwright.access.Access`, and renders the answer as JSON (or server-sent events).
"""
