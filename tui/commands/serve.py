"""`llmchat serve`: load the model, start the engine, serve the OpenAI API on uvicorn until Ctrl+C."""
from __future__ import annotations

import argparse
import functools
import ipaddress
import os
import socket
import sys


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: a free one, printed once bound); OSError says what is wrong."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}; choose another --port or --host") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def run_serve(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be from 0 to 65535, got {args.port}")
    if args.max_pending < 1:
        raise ValueError("--max-pending must be at least 1")
    args.api_key = args.api_key or os.environ.get("LLMCHAT_API_KEY") or None
    if args.header_timeout <= 0 or args.max_connections < 1:
        raise ValueError("--header-timeout must be positive and --max-connections at least 1")
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if not is_loopback(args.host) and not args.api_key:
        say(f"llmchat serve: warning: listening on {args.host} without --api-key (or LLMCHAT_API_KEY): anyone who can reach this "
            "machine can use the model; pass --api-key KEY")
    sock = bind_socket(args.host, args.port)  # before the model loads: a taken port fails at once
    import uvicorn

    from ...core.engine.engine import LLMEngine
    from ...core.model.loader import load_model_for
    from ...core.serve.connections import GuardedH11Protocol
    from ...core.serve.server import OpenAIServer
    from ...core.serve.served_engine import ServedEngine
    from ...core.config import model_label
    from .cli import engine_config

    from ...core.passing_thread import run_in_passing_thread

    config = engine_config(args, max_num_seqs=args.max_num_seqs)
    # (not in this thread, which stays alive serving: see core/passing_thread.py)
    engine = run_in_passing_thread(lambda: LLMEngine(load_model_for(config, progress=say), config))
    served = ServedEngine(engine, args.served_model_name or model_label(config.model))
    server = OpenAIServer(served, api_key=args.api_key, max_pending=args.max_pending)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    say(f"llmchat serve: {served.info.model_name} on http://{shown}:{port}/v1 (metrics: /metrics; Ctrl+C stops)")
    protocol = functools.partial(GuardedH11Protocol, header_timeout=args.header_timeout,
                                 max_connections=args.max_connections)
    uv = uvicorn.Server(uvicorn.Config(server.app, log_level="warning", timeout_graceful_shutdown=3,
                                       access_log=False, ws="none", lifespan="off", http=protocol,
                                       timeout_keep_alive=5, h11_max_incomplete_event_size=16 << 10))
    try:
        uv.run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl+C: uvicorn has closed the connections already; a clean stop
        pass
    finally:
        served.shutdown()
    return 0
