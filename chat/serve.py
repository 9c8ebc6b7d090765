"""daphne with this app's WebSocket frame limit (AGENTLAB_WS_MAX_FRAME_BYTES), e.g.
`python -m chat.serve -b 127.0.0.1 -p 8001 agentlab_site.asgi:application`.

Plain daphne reads 1 MiB a frame and silently drops the connection over it: a long paste vanished.
"""

from __future__ import annotations

import os
import sys

# Imported first: daphne.server installs the asyncio reactor that Twisted must use.
from daphne.cli import CommandLineInterface
from daphne.server import Server
from django.conf import settings


class FrameLimitServer(Server):  # type: ignore[misc]
    """daphne's server, closing with 1009 and the reason when a frame is over the limit."""

    def run(self) -> None:
        from twisted.internet import reactor

        # autobahn's default drops the TCP connection instead; daphne offers no option for it.
        # The factory exists once run() has set it up, before the reactor starts.
        reactor.callWhenRunning(lambda: self.ws_factory.setProtocolOptions(failByDrop=False))
        super().run()


class ServeCommand(CommandLineInterface):  # type: ignore[misc]
    """daphne's options; the frame limits default to AGENTLAB_WS_MAX_FRAME_BYTES."""

    server_class = FrameLimitServer

    def __init__(self) -> None:
        super().__init__()
        limit = settings.AGENTLAB_WS_MAX_FRAME_BYTES
        self.parser.set_defaults(websocket_max_message_size=limit, websocket_max_frame_size=limit)


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentlab_site.settings")
    ServeCommand().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
