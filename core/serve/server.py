"""`llmchat serve`: an OpenAI-compatible HTTP API (Starlette on uvicorn) on the embedded engine.

POST /v1/chat/completions and /v1/completions (whole or streamed as SSE), GET /v1/models, /health and
/metrics (core/serve/metrics.py). Requests from all clients go to one engine and are batched together.
A request's fault is its own: bad input is a 4xx JSON error saying what to change, a prompt the engine
refuses (over the context) is a 400 before any byte of a stream is sent, a client that goes away has its
request aborted and its KV blocks freed, and an unexpected error is a 500 for that request only.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..api.events import Finished, TextDelta
from ..text.reasoning import CONTENT, ReasoningSplitter, split_reasoning
from .request import ApiError, ParsedRequest, decode_body, parse_chat, parse_completion, read_capped_body
from .response import SSE_DONE, Reply, sse
from .served_engine import RequestStream, ServedEngine
from .metrics import CONTENT_TYPE

log = logging.getLogger(__name__)
DEFAULT_MAX_PENDING = 512  # requests in flight at once; more get 429 (each holds a queue slot, not KV)


class _ClientGone(Exception):
    pass


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


class _Watch:
    """Waits for a request's next engine event while watching for its client going away (non-streaming)."""

    def __init__(self, request: Request, served: ServedEngine, stream: RequestStream) -> None:
        self.served, self.stream = served, stream
        self.gone = asyncio.ensure_future(self._until_disconnected(request))

    @staticmethod
    async def _until_disconnected(request: Request) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def next(self):
        task = asyncio.ensure_future(self.served.next_event(self.stream))
        done, _ = await asyncio.wait({task, self.gone}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        self.served.cancel(self.stream)
        raise _ClientGone

    def close(self) -> None:
        self.gone.cancel()


class _EventStream(StreamingResponse):
    """SSE whose engine request is aborted however the response ends (client gone, server stopping)."""

    def __init__(self, content, on_close) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class OpenAIServer:
    def __init__(self, served: ServedEngine, api_key: str | None = None, max_pending: int = DEFAULT_MAX_PENDING):
        self.served = served
        self.api_key = api_key
        self.max_pending = max_pending
        self.num_pending = 0  # (the event loop's thread only)
        self.model_name = served.info.model_name
        self.max_context = served.info.context_length
        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ]
        handlers = {HTTPException: self._http_error, ApiError: lambda _, e: error_response(e),
                    Exception: self._internal_error}
        self.app = Starlette(routes=routes, exception_handlers=handlers)

    # -- plain routes -----------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if not self.served.alive:
            return JSONResponse({"status": "engine stopped"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        self._check_key(request)
        model = {"id": self.model_name, "object": "model", "created": int(time.time()), "owned_by": "llmchat",
                 "max_model_len": self.max_context}
        return JSONResponse({"object": "list", "data": [model]})

    async def metrics(self, request: Request) -> Response:
        return Response(self.served.metrics.text(), media_type=CONTENT_TYPE)

    # -- completions ------------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        parsed = await self._parse(request, parse_chat)
        return await self._run(request, parsed, lambda: self.served.submit_chat(parsed.messages, parsed.params), True)

    async def completions(self, request: Request) -> Response:
        parsed = await self._parse(request, parse_completion)
        prompt_ids = await asyncio.to_thread(self.served.tokenizer.encode, parsed.prompt)
        return await self._run(request, parsed, lambda: self.served.submit_ids(prompt_ids, parsed.params), False)

    async def _parse(self, request: Request, parse) -> ParsedRequest:
        self._check_key(request)
        try:
            body = decode_body(await read_capped_body(request))
        except ClientDisconnect:
            raise ApiError(400, "the client went away before sending the whole body") from None
        parsed = parse(body, self.max_context)
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ApiError(404, f"this server serves the model {self.model_name!r}, not {model!r}", "model",
                           "model_not_found")
        return parsed

    async def _run(self, request: Request, parsed: ParsedRequest, submit, chat: bool) -> Response:
        if not self.served.alive:
            raise ApiError(503, "the engine has stopped; restart llmchat serve", kind="server_error")
        if self.num_pending >= self.max_pending:
            raise ApiError(429, f"the server has {self.num_pending} requests in flight; retry later",
                           kind="rate_limit_error")
        self.num_pending += 1
        stream = submit()
        watch = _Watch(request, self.served, stream)
        released = handed_over = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.num_pending -= 1
                self.served.cancel(stream)

        try:
            first = await watch.next()
            if isinstance(first, Finished):  # refused before it started: nothing was generated
                raise ApiError(400, first.error or "the request was refused", "messages" if chat else "prompt")
            reply = Reply(self.model_name, chat)
            # chat replies: <think> text apart, as reasoning_content (completions: the raw text)
            inside = bool(getattr(first, "reasoning_open", False)) if chat else None
            if parsed.stream:
                handed_over = True  # from here the response releases it, however it ends
                return _EventStream(self._sse(stream, reply, parsed.include_usage, inside), release)
            return await self._whole(watch, reply, inside)
        except _ClientGone:
            return Response(status_code=499)
        finally:
            watch.close()
            if not handed_over:
                release()

    async def _whole(self, watch: _Watch, reply: Reply, inside: bool | None) -> Response:
        """`inside`: split the reply's reasoning off (True: it began inside `<think>`); None: the raw text."""
        while not isinstance(event := await watch.next(), Finished):
            pass
        if event.error:
            raise ApiError(500, f"the reply was cut short: {event.error}", kind="server_error")
        text, reasoning = event.text, None
        if inside is not None:
            reasoning, text = split_reasoning(event.text, inside)
            reasoning = reasoning if reasoning or inside or text != event.text else None
        return JSONResponse(reply.whole(text, event.reason, event.metrics, reasoning))

    async def _sse(self, stream: RequestStream, reply: Reply, include_usage: bool, inside: bool | None):
        splitter = ReasoningSplitter(inside) if inside is not None else None
        if reply.chat:
            yield reply.chunk("", first=True)
        while True:
            event = await self.served.next_event(stream)
            if isinstance(event, TextDelta):
                if event.text and splitter is None:
                    yield reply.chunk(event.text)
                elif event.text:
                    for chunk in self._pieces(reply, splitter.feed(event.text)):
                        yield chunk
            elif isinstance(event, Finished):
                break
        if splitter is not None:
            for chunk in self._pieces(reply, splitter.flush()):
                yield chunk
        if event.error:
            yield sse(ApiError(500, f"the reply was cut short: {event.error}", kind="server_error").body())
        else:
            yield reply.chunk(None, event.reason)
            if include_usage:
                yield reply.usage_chunk(event.metrics)
        yield SSE_DONE

    @staticmethod
    def _pieces(reply: Reply, pieces: list[tuple[str, str]]) -> list[bytes]:
        return [reply.chunk(text) if kind == CONTENT else reply.chunk(None, reasoning=text) for kind, text in pieces]

    # -- errors -----------------------------------------------------------------------------
    def _check_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            raise ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                           kind="authentication_error")

    @staticmethod
    async def _http_error(request: Request, e: HTTPException) -> Response:
        return error_response(ApiError(e.status_code, f"{request.method} {request.url.path}: {e.detail}"))

    @staticmethod
    async def _internal_error(request: Request, e: Exception) -> Response:
        log.exception("request failed")
        return error_response(ApiError(500, f"internal error: {type(e).__name__}: {e}", kind="server_error"))
