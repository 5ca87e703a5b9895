"""On-disk spool: batches the server has not acknowledged yet.

Layout: <root>/<job>/r<rank>/<session>/ holds one file per batch,
"<seq:012d>.batch", written to a ".tmp" name and renamed, so a file that
exists is complete. Its first line is "#rankdb-batch <batch id> <records>",
the rest is the NDJSON body exactly as it is POSTed. The session directory
holds "lock", flock()ed by the owning process for its whole life.

Exactly once: a batch file is deleted only after the server answered 2xx
(or refused it for good); a batch sent again after a crash carries the same
batch id, so the server acknowledges it without applying it twice.

Crash recovery: at start a process adopts every session directory of the
same job and rank whose lock it can take (its owner is gone) and sends
those batches first, oldest first.

Order: batches are kept (and named, and sent, and dropped) in the order the
batcher sealed them (Batch.seq), not the order they reached the spool: the
sender spilling its memory queue and the batcher putting newer batches run
at the same time, and a spill must never put older batches behind newer
ones (the bound below would then drop the newest).

Bound: the spool of one process holds at most max_bytes; putting a batch
that does not fit drops the oldest batches (counted, with a warning).

Thread safety: every method takes self.lock; file I/O happens in the
calling thread (the batcher or the sender, never the training thread).
"""

import collections
import fcntl
import os
import threading

HEADER = b"#rankdb-batch "


class Entry:
    """seq: the batch's sealing order in this process; -1 for a batch
    adopted from a dead process (older than anything of this one)."""
    __slots__ = ("path", "batch_id", "records", "size", "dirpath", "seq")

    def __init__(self, path, batch_id, records, size, dirpath, seq=-1):
        self.path, self.batch_id, self.records, self.size, self.dirpath, self.seq = \
            path, batch_id, records, size, dirpath, seq


class Spool:
    def __init__(self, root, job, rank, session, max_bytes, warn):
        self.dir = os.path.join(root, job, "r%d" % rank)
        self.session_dir = os.path.join(self.dir, session)
        self.max_bytes = max_bytes
        self.warn = warn
        self.lock = threading.Lock()
        self.entries = collections.deque()  # oldest first
        self.bytes = 0
        self.dropped_batches = 0
        self.dropped_records = 0
        self.adopted_batches = 0
        self._locks = {}  # dirpath -> open lock file (held)
        self.ok = False
        try:
            os.makedirs(self.session_dir, exist_ok=True)
            self._locks[self.session_dir] = self._take_lock(self.session_dir, block=False)
            self.ok = self._locks[self.session_dir] is not None
        except OSError as e:
            warn("spool", "spool directory %s is not usable (%s): batches the server does not "
                 "take are kept in memory only" % (self.session_dir, e))

    @staticmethod
    def _take_lock(d, block):
        fd = os.open(os.path.join(d, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except OSError:
            os.close(fd)
            return None
        return fd

    def adopt_orphans(self):
        """Takes over the batches of dead processes of the same job and rank.
        Returns the number of batches adopted."""
        if not self.ok:
            return 0
        try:
            sessions = sorted(os.listdir(self.dir))
        except OSError:
            return 0
        found = []
        for s in sessions:
            d = os.path.join(self.dir, s)
            if d == self.session_dir or not os.path.isdir(d):
                continue
            try:
                fd = self._take_lock(d, block=False)
            except OSError:
                continue
            if fd is None:
                continue  # a live process owns it
            with self.lock:
                self._locks[d] = fd
            found.extend(self._scan(d))
        found.sort(key=lambda e: (os.path.basename(e.dirpath), e.path))
        with self.lock:
            # orphans are older than anything this process wrote
            for e in reversed(found):
                self.entries.appendleft(e)
                self.bytes += e.size
            self.adopted_batches += len(found)
        for d in list(self._locks):
            if d != self.session_dir:
                self._maybe_remove_dir(d)
        return len(found)

    def _scan(self, d):
        out = []
        for fn in sorted(os.listdir(d)):
            p = os.path.join(d, fn)
            if fn.endswith(".tmp"):  # a crash during a write: never acknowledged, never complete
                _unlink(p)
                continue
            if not fn.endswith(".batch"):
                continue
            try:
                with open(p, "rb") as f:
                    first = f.readline(300)
                size = os.path.getsize(p)
                parts = first[len(HEADER):].split()
                if not first.startswith(HEADER) or len(parts) != 2:
                    raise ValueError("bad header %r" % first[:80])
                out.append(Entry(p, parts[0].decode("ascii"), int(parts[1]), size, d))
            except (OSError, ValueError, UnicodeDecodeError) as e:
                self.warn("spool-bad", "spool file %s is damaged (%s); deleted" % (p, e))
                _unlink(p)
        return out

    def __len__(self):
        return len(self.entries)

    def put(self, batch_id, body, records, seq):
        """Writes one batch; seq is its sealing order (unique in this
        process). False if the spool is unusable (caller keeps it)."""
        if not self.ok:
            return False
        data = HEADER + ("%s %d\n" % (batch_id, records)).encode("ascii") + body
        with self.lock:
            if not self._make_room(len(data), seq, batch_id, records):
                return True  # older than everything kept: it is the one dropped
            # named by seq: an adopting process sends them in sealing order too
            path = os.path.join(self.session_dir, "%012d.batch" % seq)
            tmp = path + ".tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except OSError as e:
                _unlink(tmp)
                self.warn("spool-write", "cannot write spool file %s (%s)" % (path, e))
                return False
            e = Entry(path, batch_id, records, len(data), self.session_dir, seq)
            i = len(self.entries)  # nearly always the end: walk back from there
            while i > 0 and self.entries[i - 1].seq > seq:
                i -= 1
            self.entries.insert(i, e)
            self.bytes += len(data)
        return True

    def _make_room(self, need, seq, batch_id, records):
        """Drops the oldest batches until need more bytes fit. False when the
        batch being put (seq) is itself older than every batch kept: then it
        is the one dropped (counted the same way)."""
        while self.bytes + need > self.max_bytes and self.entries:
            if self.entries[0].seq > seq:
                self._count_drop(batch_id, records)
                return False
            e = self.entries.popleft()
            self.bytes -= e.size
            _unlink(e.path)
            self._count_drop(e.batch_id, e.records)
        return True

    def _count_drop(self, batch_id, records):
        self.dropped_batches += 1
        self.dropped_records += records
        self.warn("spool-full", "spool %s is full (%d bytes): dropped the oldest batch %s "
                  "(%d records); %d batches (%d records) dropped so far" %
                  (self.dir, self.max_bytes, batch_id, records,
                   self.dropped_batches, self.dropped_records))

    def oldest(self):
        """-> (Entry, body bytes) of the oldest batch, or None."""
        with self.lock:
            while self.entries:
                e = self.entries[0]
                try:
                    with open(e.path, "rb") as f:
                        f.readline(300)
                        return e, f.read()
                except OSError as err:
                    self.warn("spool-read", "spool file %s unreadable (%s); skipped" % (e.path, err))
                    self.entries.popleft()
                    self.bytes -= e.size
            return None

    def remove(self, e):
        with self.lock:
            try:
                self.entries.remove(e)
                self.bytes -= e.size
            except ValueError:
                return  # already dropped by _make_room
            _unlink(e.path)
            d = e.dirpath
        if d != self.session_dir:
            self._maybe_remove_dir(d)

    def _maybe_remove_dir(self, d):
        with self.lock:
            if any(e.dirpath == d for e in self.entries):
                return
            fd = self._locks.pop(d, None)
        _remove_session_dir(d)
        if fd is not None:
            os.close(fd)

    def close(self):
        """Releases the locks; removes this session's directory when empty
        (else the next process of this rank adopts what is left)."""
        with self.lock:
            left = {e.dirpath for e in self.entries}
            locks, self._locks = self._locks, {}
        for d, fd in locks.items():
            if d not in left:
                _remove_session_dir(d)
            os.close(fd)
        self.ok = False


def _unlink(p):
    try:
        os.unlink(p)
    except OSError:
        pass


def _remove_session_dir(d):
    try:
        for fn in os.listdir(d):
            if fn.endswith(".batch"):
                return  # something arrived meanwhile: keep it
        _unlink(os.path.join(d, "lock"))
        os.rmdir(d)
    except OSError:
        pass
