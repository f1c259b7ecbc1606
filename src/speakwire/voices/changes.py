"""Whether the voice database changed, told without SQLite, a lock or a thread.

In the rollback-journal mode the store uses (SQLite's default), every commit — from
any connection, thread or process: this server, another one on the same data dir,
``speakwire voices add`` — increments the *file change counter*, four bytes at offset
24 of the database header, which SQLite keeps so that other processes can see a
change. Reading it is an open, a 100-byte read and a close of a file in the page
cache (microseconds), so a server can do it on the event loop for each request that
names a voice, and go to SQLite (on a thread) only when the counter moved.

The counter of a commit still under way is visible (its first page is written before
the commit ends), and so is that of one a crash then rolled back: whoever keeps what
it read alongside a marker reads the marker before and after, and trusts only an
unchanged one (``speakwire.server.voices.library``).
"""

from __future__ import annotations

import os
from pathlib import Path

Marker = tuple[int, int, int]
"""(device, inode, change counter) of the database file."""
NO_DATABASE: Marker = (-1, -1, -1)
"""The marker of a library that does not exist yet (nothing saved)."""
_HEADER = 100
_MAGIC = b"SQLite format 3\x00"
_ROLLBACK_JOURNAL = b"\x01\x01"
"""Header bytes 18 and 19 (write and read format): 1 for a rollback journal, 2 for WAL, which leaves the counter."""


def change_marker(database: Path) -> Marker | None:
    """The database's marker now; ``NO_DATABASE`` when there is none; None when a change cannot be told this way
    (a WAL database, a header that is not SQLite's or cannot be read): then ask SQLite."""
    try:
        fd = os.open(database, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return NO_DATABASE
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        header = os.read(fd, _HEADER)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(header) < _HEADER or not header.startswith(_MAGIC) or header[18:20] != _ROLLBACK_JOURNAL:
        return None
    return info.st_dev, info.st_ino, int.from_bytes(header[24:28], "big")
