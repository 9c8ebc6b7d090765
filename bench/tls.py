"""What a kept provider connection saves over HTTPS: a local TLS endpoint, two ways of asking it.

A run used to open a client and a connection of its own: against a real (HTTPS) provider that
is a TCP and a TLS handshake per run. Runs now borrow a client whose connection stays open
(chat.agent.http.borrow_client). This phase measures both ways with the transport runs use,
against a one-reply SSE endpoint on TLS in a process of its own (a self-signed certificate made
for the occasion), and reads the CPU of the asking process only: per request, a new client and
connection each time against one client kept for all.

`python -m bench.tls serve CERT KEY PORT` is the endpoint; the bench starts it.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from chat.agent.http import PacedTransport
from chat.testing.processes import ROOT, free_port

REPLY = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
    len(REPLY),
    REPLY,
)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Every request on the connection gets the same short SSE reply (keep-alive)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":", 1)[1]))
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def serve(cert: str, key: str, port: int) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(_answer, "127.0.0.1", port, ssl=context)
    print("ready", flush=True)
    await server.serve_forever()


async def _ask(client: httpx.AsyncClient, url: str) -> None:
    async with client.stream("POST", url, content=b"{}") as response:
        async for _ in response.aiter_lines():
            pass


async def _rounds(url: str, context: ssl.SSLContext, requests: int) -> dict[str, list[float]]:
    """CPU ms per request of this process, each way, in alternating rounds."""
    figures: dict[str, list[float]] = {"new": [], "kept": []}
    for way in ("new", "kept", "new", "kept"):
        kept = httpx.AsyncClient(transport=PacedTransport(verify=context))
        await _ask(kept, url)  # the kept client's connection is open before the clock starts
        started = time.process_time()
        for _ in range(requests):
            if way == "kept":
                await _ask(kept, url)
            else:
                async with httpx.AsyncClient(transport=PacedTransport(verify=context)) as client:
                    await _ask(client, url)
        figures[way].append((time.process_time() - started) / requests * 1000)
        await kept.aclose()
    return figures


def measure(requests: int = 200) -> dict[str, Any]:
    """Client CPU per request over TLS, a new connection each time against a kept one."""
    with tempfile.TemporaryDirectory() as directory:
        cert, key = self_signed(Path(directory))
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.tls", "serve", str(cert), str(key), str(port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError("the TLS endpoint did not start")
            context = ssl.create_default_context(cafile=str(cert))
            figures = asyncio.run(_rounds(f"https://127.0.0.1:{port}/v1", context, requests))
        finally:
            server.terminate()
            server.wait(timeout=10)
    new, kept = min(figures["new"]), min(figures["kept"])
    return {
        "requests": requests,
        "new_connection_ms": new,
        "kept_connection_ms": kept,
        "saved_ms": new - kept,
        "rounds": figures,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(serve(sys.argv[2], sys.argv[3], int(sys.argv[4])))
