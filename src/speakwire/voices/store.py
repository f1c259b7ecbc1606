"""VoiceStore: the voice library on disk — SQLite for metadata, one directory of files per voice.

Layout under ``<data dir>/voices/``::

    library.sqlite3          voices and prompts tables (the source of truth)
    .lock                    flock: shared while a store is open, exclusive to recover
    items/<id>/audio.flac    normalised 24 kHz mono reference
    items/<id>/prompt-<key>.pt   clone prompt per model (``prompts.model_key``)
    staging/<id>/            a voice being written
    trash/<id>/              a voice being deleted

Crash safety comes from ordering, so that a crash at any instant leaves either no
voice or a whole one:

1. *add*: files are written under ``staging/<id>/`` and each fsynced; the directory
   is fsynced and renamed to ``items/<id>`` (atomic, and fsynced again); only then
   is the row inserted, in one transaction. A voice exists exactly when its row is
   committed, and a row is only ever committed over complete files. A crash before
   the commit leaves a directory without a row: recovery deletes it.
2. *delete*: the row goes first (one transaction), then the directory moves to
   ``trash/`` and is removed. A crash in between leaves files without a row.
3. *prompt*: written to a temporary name, fsynced, renamed into the voice's
   directory, then recorded. A file without a record is removed at recovery, and
   a record whose file is gone is dropped (the prompt is computed again).

Recovery runs when a store opens and no other store (another server, a CLI run)
has the library open, which the ``.lock`` flock tells; it also drops rows whose
audio file is missing, so the library never lists a voice it cannot speak.
``tests/voices/test_voice_crash_kill.py`` holds a server to this: SIGKILLed at
random points while voices are added, imported and deleted, then restarted.

A full disk (ENOSPC, a quota, SQLite's ``SQLITE_FULL``) fails a write at whatever
step it reaches; that step's own undo runs as for any error, and the failure is
raised as ``InsufficientStorageError`` (HTTP 507) rather than as an internal error.

A name is unique case-insensitively by a UNIQUE constraint, so of two uploads
racing for one name exactly one commits and the other gets a clear 409; the
voice count cap is checked inside the same write transaction. Everything here
blocks: the server calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from speakwire.errors import ConflictError, InsufficientStorageError, NotFoundError, SpeakwireError
from speakwire.voices.audio import AUDIO_FILE, ReferenceAudio
from speakwire.voices.changes import Marker, change_marker
from speakwire.voices.fields import VoiceFields
from speakwire.voices.models import PromptRecord, SavedVoice
from speakwire.voices.names import name_key
from speakwire.voices.prompts import model_key

try:
    import fcntl
except ImportError:  # Windows: no flock; recovery then runs on every open
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

DEFAULT_MAX_VOICES = 1000
"""vLLM-Omni's default cap too."""
SCHEMA_VERSION = 1
DATABASE = "library.sqlite3"
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS voices (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        name_key TEXT NOT NULL UNIQUE,
        consent TEXT NOT NULL,
        created_at REAL NOT NULL,
        duration_s REAL NOT NULL,
        ref_text TEXT,
        speaker_description TEXT,
        language TEXT,
        file_size INTEGER NOT NULL,
        mime_type TEXT NOT NULL,
        audio_sha256 TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS prompts (
        voice_id TEXT NOT NULL REFERENCES voices(id) ON DELETE CASCADE,
        model_key TEXT NOT NULL,
        engine TEXT NOT NULL,
        model TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (voice_id, model_key)
    )""",
)
_VOICE_COLUMNS = (
    "id, name, consent, created_at, duration_s, ref_text, speaker_description, language, file_size, mime_type, "
    "audio_sha256"
)


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$SPEAKWIRE_DATA_DIR``, else ``$XDG_DATA_HOME/speakwire``, else ``~/.local/share/speakwire``."""
    environ = os.environ if environ is None else environ
    if environ.get("SPEAKWIRE_DATA_DIR"):
        return Path(environ["SPEAKWIRE_DATA_DIR"]).expanduser()
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "speakwire"


def max_voices_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``$SPEAKWIRE_MAX_VOICES`` (a positive integer), else ``DEFAULT_MAX_VOICES``."""
    raw = (os.environ if environ is None else environ).get("SPEAKWIRE_MAX_VOICES", "")
    if not raw.strip():
        return DEFAULT_MAX_VOICES
    value = int(raw)
    if value < 1:
        raise ValueError(f"SPEAKWIRE_MAX_VOICES must be at least 1, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class PromptFile:
    """A clone prompt to save with a voice: who computed it, and its bytes (``prompts.dump_prompt``)."""

    engine: str
    model: str
    data: bytes


class VoiceStore:
    """Saved voices under ``<data_dir>/voices``; nothing is created on disk until the first voice is saved.

    ``open()`` recovers from an interrupted write (see the module docstring) and holds a shared lock until
    ``close()``; use it as a context manager.
    """

    def __init__(self, data_dir: str | Path, *, max_voices: int = DEFAULT_MAX_VOICES) -> None:
        if max_voices < 1:
            raise ValueError("max_voices must be at least 1")
        self.data_dir = Path(data_dir).expanduser()
        self.root = self.data_dir / "voices"
        self.max_voices = max_voices
        self._lock_fd: int | None = None
        self._setup = threading.Lock()

    # ----- lifetime ------------------------------------------------------------------------

    def open(self) -> VoiceStore:
        """Take the library's shared lock and, if no one else has it open, repair an interrupted write."""
        if self.root.is_dir():
            with self._setup:
                self._lock_and_recover()
        return self

    def close(self) -> None:
        with self._setup:
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    def __enter__(self) -> VoiceStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def location(self) -> str:
        """Where the library lives, for messages."""
        return str(self.root)

    # ----- reading -------------------------------------------------------------------------

    def find(self, name: str) -> SavedVoice | None:
        """The voice called ``name`` (any case), or None."""
        if not self._joined():
            return None
        with self._connect() as db:
            row = db.execute(f"SELECT {_VOICE_COLUMNS} FROM voices WHERE name_key = ?", (name_key(name),)).fetchone()
            return None if row is None else self._voices(db, [row])[0]

    def get(self, name: str) -> SavedVoice:
        """The voice called ``name``.

        Raises:
            NotFoundError: No such voice.
        """
        voice = self.find(name)
        if voice is None:
            raise NotFoundError(f"Voice '{name}' not found", param="name")
        return voice

    def list_voices(self) -> list[SavedVoice]:
        """Every voice, oldest first."""
        if not self._joined():
            return []
        with self._connect() as db:
            rows = db.execute(f"SELECT {_VOICE_COLUMNS} FROM voices ORDER BY created_at, name_key").fetchall()
            return self._voices(db, rows)

    def name_keys(self) -> frozenset[str]:
        """The ``name_key`` of every voice: what ``find`` matches a name against."""
        if not self._joined():
            return frozenset()
        with self._connect() as db:
            return frozenset(str(row[0]) for row in db.execute("SELECT name_key FROM voices"))

    def change_marker(self) -> Marker | None:
        """A value that changes with every commit to the library, by any process (``changes.change_marker``).

        Cheap enough for the event loop: it reads the database header, never SQLite's locks.
        """
        return change_marker(self._database)

    def count(self) -> int:
        if not self._joined():
            return 0
        with self._connect() as db:
            return int(db.execute("SELECT count(*) FROM voices").fetchone()[0])

    def read_audio(self, voice: SavedVoice) -> bytes:
        """The stored FLAC reference of ``voice``."""
        try:
            return (self._item(voice.id) / AUDIO_FILE).read_bytes()
        except FileNotFoundError as exc:
            raise NotFoundError(f"Voice '{voice.name}' not found (it was deleted)", param="name") from exc

    def read_prompt(self, voice: SavedVoice, engine: str, model: str) -> bytes | None:
        """The saved prompt of ``voice`` for the model, or None when none was saved (or it vanished)."""
        record = voice.prompt_for(model_key(engine, model))
        if record is None:
            return None
        try:
            return (self._item(voice.id) / _prompt_file(record.key)).read_bytes()
        except FileNotFoundError:
            return None

    # ----- writing -------------------------------------------------------------------------

    def add(
        self,
        fields: VoiceFields,
        audio: ReferenceAudio,
        *,
        prompts: Sequence[PromptFile] = (),
        created_at: float | None = None,
    ) -> SavedVoice:
        """Save a voice: all of it, or — on any error or crash — none of it.

        Raises:
            ConflictError: The name is taken (also when another upload of it commits first), or the
                library holds ``max_voices`` voices.
        """
        with self._disk_full_refused(f"saving voice '{fields.name}'"):
            self._ensure_created()
        with self._connect() as db:
            self._check_room(db, name_key(fields.name), fields.name)  # early and cheap; the insert checks again
        return self.insert(new_voice(fields, audio, prompts, created_at=created_at), audio.flac, prompts)

    def insert(self, voice: SavedVoice, flac: bytes, prompts: Sequence[PromptFile] = ()) -> SavedVoice:
        """Save ``voice`` as it is, id and dates included (``add`` makes a new one; a cache copies one saved
        elsewhere), with the same all-or-nothing guarantee. ``prompts`` match ``voice.prompts`` in order.

        Raises:
            ConflictError: The name is taken, or the library is full.
            InsufficientStorageError: The disk is full; nothing of the voice was kept.
        """
        with self._disk_full_refused(f"saving voice '{voice.name}'"):
            self._ensure_created()
            staging = self._stage(voice, flac, prompts)
            try:
                item = self._publish(staging)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            try:
                self._commit(voice)
            except BaseException:
                self._discard(item)
                raise
        logger.info(
            "voices: saved '%s' (%.1f s, %s)",
            voice.name,
            voice.duration_s,
            "x-vector only" if voice.x_vector_only_mode else "with transcript",
        )
        return voice

    def delete(self, name: str) -> SavedVoice:
        """Remove a voice: its row first (then it is gone for every reader), its files after.

        Raises:
            NotFoundError: No such voice.
            InsufficientStorageError: The disk is too full even for SQLite's journal; the voice is still there.
        """
        voice = self.find(name)
        if voice is None:
            raise NotFoundError(f"Voice '{name}' not found", param="name")
        with self._disk_full_refused(f"deleting voice '{voice.name}'"), self._connect() as db, _write(db):
            deleted = db.execute("DELETE FROM voices WHERE id = ?", (voice.id,)).rowcount
        if not deleted:
            raise NotFoundError(f"Voice '{name}' not found", param="name")
        self._discard(self._item(voice.id))
        logger.info("voices: deleted '%s'", voice.name)
        return voice

    def save_prompt(self, voice: SavedVoice, prompt: PromptFile) -> PromptRecord | None:
        """Keep a clone prompt computed for ``voice``; None if the voice was deleted meanwhile.

        Raises:
            InsufficientStorageError: The disk is full; the prompt was not kept (it is computed again later).
        """
        if not self._joined():
            return None
        with self._disk_full_refused(f"saving the clone prompt of voice '{voice.name}'"):
            return self._save_prompt(voice, prompt)

    def _save_prompt(self, voice: SavedVoice, prompt: PromptFile) -> PromptRecord | None:
        key = model_key(prompt.engine, prompt.model)
        item = self._item(voice.id)
        temporary = item / f".{_prompt_file(key)}.{secrets.token_hex(4)}.tmp"
        try:
            _write_file(temporary, prompt.data)
            os.replace(temporary, item / _prompt_file(key))
            _fsync_dir(item)
        except FileNotFoundError:
            return None  # the voice's directory went to the trash: deleted
        except BaseException:
            temporary.unlink(missing_ok=True)  # a full disk: no half-written prompt stays beside the voice
            raise
        record = PromptRecord(prompt.engine, prompt.model, key, time.time())
        with self._connect() as db, _write(db):
            if db.execute("SELECT 1 FROM voices WHERE id = ?", (voice.id,)).fetchone() is None:
                return None
            db.execute(
                "INSERT OR REPLACE INTO prompts (voice_id, model_key, engine, model, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (voice.id, key, record.engine, record.model, record.created_at),
            )
        return record

    # ----- the steps of add (separate so a test can stop the process between them) -----------

    def _stage(self, voice: SavedVoice, flac: bytes, prompts: Sequence[PromptFile]) -> Path:
        """Write every file of the voice under ``staging/<id>``, each fsynced, and the directory too."""
        staging = self.root / "staging" / voice.id
        staging.mkdir()
        try:
            _write_file(staging / AUDIO_FILE, flac)
            for prompt, record in zip(prompts, voice.prompts, strict=True):
                _write_file(staging / _prompt_file(record.key), prompt.data)
            _fsync_dir(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def _publish(self, staging: Path) -> Path:
        """Move the complete directory into ``items/`` in one atomic rename."""
        item = self.root / "items" / staging.name
        os.rename(staging, item)
        _fsync_dir(item.parent)
        _fsync_dir(staging.parent)
        return item

    def _commit(self, voice: SavedVoice) -> None:
        """The instant the voice comes into being: one transaction, with the name and cap checks."""
        try:
            with self._connect() as db, _write(db):
                self._check_room(db, name_key(voice.name), voice.name)
                db.execute(
                    f"INSERT INTO voices ({_VOICE_COLUMNS}, name_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        voice.id,
                        voice.name,
                        voice.consent,
                        voice.created_at,
                        voice.duration_s,
                        voice.ref_text,
                        voice.speaker_description,
                        voice.language,
                        voice.file_size,
                        voice.mime_type,
                        voice.audio_sha256,
                        name_key(voice.name),
                    ),
                )
                db.executemany(
                    "INSERT INTO prompts (voice_id, model_key, engine, model, created_at) VALUES (?, ?, ?, ?, ?)",
                    [(voice.id, p.key, p.engine, p.model, p.created_at) for p in voice.prompts],
                )
        except sqlite3.IntegrityError as exc:  # the UNIQUE name: another upload of it committed first
            raise name_taken(voice.name) from exc

    def _check_room(self, db: sqlite3.Connection, key: str, name: str) -> None:
        if db.execute("SELECT 1 FROM voices WHERE name_key = ?", (key,)).fetchone() is not None:
            raise name_taken(name)
        count = int(db.execute("SELECT count(*) FROM voices").fetchone()[0])
        if count >= self.max_voices:
            raise ConflictError(
                f"The voice library is full ({count} voices; the limit is {self.max_voices}, set by "
                "--max-voices or SPEAKWIRE_MAX_VOICES). Delete a voice first.",
                param="name",
            )

    @contextlib.contextmanager
    def _disk_full_refused(self, what: str) -> Iterator[None]:
        """Raise a full disk as ``InsufficientStorageError``; the step that failed has undone itself by then."""
        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            if not _is_disk_full(exc):
                raise
            error = InsufficientStorageError(
                f"The disk holding the voice library ({self.root}) is full: {what} failed and was undone, so the "
                "library is as it was. Free some space on that disk, then try again."
            )
            logger.error("voices: %s (%s)", error.message, exc)  # the operator's to fix, not the client's
            raise error from exc

    def _discard(self, item: Path) -> None:
        """Move a voice directory to the trash and remove it; recovery finishes the job after a crash."""
        trash = self.root / "trash" / f"{item.name}-{secrets.token_hex(4)}"
        try:
            os.rename(item, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    # ----- setup and recovery --------------------------------------------------------------

    @property
    def _database(self) -> Path:
        return self.root / DATABASE

    def _item(self, voice_id: str) -> Path:
        return self.root / "items" / voice_id

    def _joined(self) -> bool:
        """Whether the library exists; a store opened before it did takes its lock (and recovers) now."""
        if self._lock_fd is not None:
            return True
        if not self._database.is_file():
            return False
        with self._setup:
            if self._lock_fd is None:
                self._lock_and_recover()
        return True

    def _ensure_created(self) -> None:
        with self._setup:
            if self._lock_fd is not None:
                return
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                self._lock_and_recover()
            except OSError as exc:
                if _is_disk_full(exc):
                    raise  # said as a full disk by the caller
                raise SpeakwireError(
                    f"Cannot create the voice library in {self.root}: {exc}. Point --data-dir (or "
                    "SPEAKWIRE_DATA_DIR) at a writable directory."
                ) from exc
            _fsync_dir(self.data_dir)

    def _lock_and_recover(self) -> None:
        for sub in ("items", "staging", "trash"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._create_schema()
        if fcntl is None:
            self._recover()
            return
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another store has the library open and may be mid-write: its staging files are not orphans.
            fcntl.flock(self._lock_fd, fcntl.LOCK_SH)
            return
        try:
            self._recover()
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_SH)

    def _create_schema(self) -> None:
        with self._connect() as db, _write(db):
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise SpeakwireError(
                    f"The voice library in {self.root} was written by a newer speakwire (schema {version}); "
                    "upgrade speakwire to use it."
                )
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _recover(self) -> None:
        """Make disk and database agree after an interrupted write (see the module docstring)."""
        removed: dict[str, int] = {}
        for leftover in [*(self.root / "staging").iterdir(), *(self.root / "trash").iterdir()]:
            _remove(leftover)
            removed["unfinished writes"] = removed.get("unfinished writes", 0) + 1
        with self._connect() as db, _write(db):
            ids = {row[0] for row in db.execute("SELECT id FROM voices")}
            for voice_id in sorted(ids):
                if not (self._item(voice_id) / AUDIO_FILE).is_file():
                    db.execute("DELETE FROM voices WHERE id = ?", (voice_id,))
                    ids.discard(voice_id)
                    removed["voices whose files were missing"] = removed.get("voices whose files were missing", 0) + 1
            prompts = {(row[0], row[1]) for row in db.execute("SELECT voice_id, model_key FROM prompts")}
            for voice_id, key in sorted(prompts):
                if not (self._item(voice_id) / _prompt_file(key)).is_file():
                    db.execute("DELETE FROM prompts WHERE voice_id = ? AND model_key = ?", (voice_id, key))
        for item in (self.root / "items").iterdir():
            if item.name not in ids:
                _remove(item)
                removed["files without a voice"] = removed.get("files without a voice", 0) + 1
                continue
            for path in item.iterdir():
                if path.name == AUDIO_FILE:
                    continue
                key = path.name.removeprefix("prompt-").removesuffix(".pt")
                if not path.name.startswith("prompt-") or (item.name, key) not in prompts:
                    _remove(path)
        if removed:
            logger.warning(
                "voices: recovered from an interrupted write in %s: removed %s",
                self.root,
                ", ".join(f"{n} {what}" for what, n in removed.items()),
            )

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # One short-lived connection per call: calls come from many worker threads, and SQLite's own
        # locking (with a busy timeout) orders writers across threads and processes alike.
        db = sqlite3.connect(self._database, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA synchronous = FULL")
            yield db
        finally:
            db.close()

    def _voices(self, db: sqlite3.Connection, rows: Sequence[sqlite3.Row]) -> list[SavedVoice]:
        prompts: dict[str, list[PromptRecord]] = {}
        if rows:
            marks = ", ".join("?" for _ in rows)
            query = f"SELECT voice_id, engine, model, model_key, created_at FROM prompts WHERE voice_id IN ({marks})"
            for row in db.execute(query, [row["id"] for row in rows]):
                record = PromptRecord(
                    str(row["engine"]), str(row["model"]), str(row["model_key"]), float(row["created_at"])
                )
                prompts.setdefault(str(row["voice_id"]), []).append(record)
        return [
            SavedVoice(
                id=str(row["id"]),
                name=str(row["name"]),
                consent=str(row["consent"]),
                created_at=float(row["created_at"]),
                duration_s=float(row["duration_s"]),
                ref_text=_opt(row["ref_text"]),
                speaker_description=_opt(row["speaker_description"]),
                language=_opt(row["language"]),
                file_size=int(row["file_size"]),
                mime_type=str(row["mime_type"]),
                audio_sha256=str(row["audio_sha256"]),
                prompts=tuple(sorted(prompts.get(str(row["id"]), ()), key=lambda p: p.created_at)),
            )
            for row in rows
        ]


@contextlib.contextmanager
def _write(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken up front (IMMEDIATE) so checks and writes inside it cannot interleave."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # SQLite rolls back by itself after some errors (SQLITE_FULL): ROLLBACK would fail
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def new_voice(
    fields: VoiceFields, audio: ReferenceAudio, prompts: Sequence[PromptFile] = (), *, created_at: float | None = None
) -> SavedVoice:
    """A voice about to be saved, under a fresh random id: its fields, its normalised audio, a record per prompt
    (in ``prompts``' order), created now unless ``created_at`` (an imported voice keeps its date)."""
    now = time.time()
    return SavedVoice(
        id=secrets.token_hex(16),
        name=fields.name,
        consent=fields.consent,
        created_at=now if created_at is None else created_at,
        duration_s=audio.audio.duration_s,
        ref_text=fields.ref_text,
        speaker_description=fields.speaker_description,
        language=fields.language,
        file_size=audio.source_size,
        mime_type=audio.mime_type,
        audio_sha256=audio.sha256,
        prompts=tuple(PromptRecord(p.engine, p.model, model_key(p.engine, p.model), now) for p in prompts),
    )


def name_taken(name: str) -> ConflictError:
    return ConflictError(
        f"A voice named '{name}' already exists (names ignore case). Delete it first (DELETE /v1/audio/voices/"
        f"{name}, or speakwire voices rm {name}) or choose another name.",
        param="name",
    )


def _prompt_file(key: str) -> str:
    return f"prompt-{key}.pt"


def _opt(value: object) -> str | None:
    return None if value is None else str(value)


def _write_file(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` and fsync it: once this returns, the bytes survive a power cut."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Persist a directory's entries (a rename or a new file); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_disk_full(exc: BaseException) -> bool:
    """ENOSPC or a quota from the OS, or SQLite's ``SQLITE_FULL`` (its journal or database could not grow)."""
    if isinstance(exc, OSError):
        return exc.errno in _DISK_FULL
    return isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
