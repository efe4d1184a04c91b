"""QSockets for Python: per-socket and per-message QoS through hostqosd.

The calls are libhostqos's (docs/qsockets.md): a qsocket is a socket
registered with hostqosd, whose traffic the host's classifier marks and
schedules from its next packet. This module is pure Python: it speaks the
daemon's API over its Unix socket and passes the socket acted on with
SCM_RIGHTS. Failures raise QSockError (an OSError: errno and the daemon's
reason).
"""

from __future__ import annotations

import errno as _errno
import json
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Optional, Union

__all__ = [
    "QosParams", "PacketFlags", "QosInfo", "QSockError",
    "FIFO", "DWCS", "EDF_LOSSY", "EDF_LOSSLESS",
    "NON_DROPPABLE", "FRAME_START", "FRAME_END", "DROP_PRIORITY_MAX",
    "TXTIME_HAS_DEADLINE", "TXTIME_NON_DROPPABLE", "TXTIME_FRAME_START", "TXTIME_FRAME_END",
    "TXTIME_PRIO_SHIFT", "TXTIME_PRIO_MASK", "TXTIME_MARKER", "TXTIME_FLAGS_MASK",
    "txtime_word",
    "qsockinit", "qsocket", "qattach", "qchange", "qinfo",
    "qsend", "qsendto", "qdetach", "qclose",
]

DEFAULT_SOCKET = "/run/hostqos/hostqosd.sock"

FIFO, DWCS, EDF_LOSSY, EDF_LOSSLESS = "fifo", "dwcs", "edf-lossy", "edf-lossless"

NON_DROPPABLE, FRAME_START, FRAME_END = 0x1, 0x2, 0x4
DROP_PRIORITY_MAX = 7

# A message's attributes as the host's scheduler gets them (<hostqos/qsock.h>
# QSOCK_TXTIME_*): on a datagram qsocket whose scheduler is not fifo, each
# message carries one SCM_TXTIME whose 64-bit value is the deadline in
# CLOCK_MONOTONIC ns rounded down to 256 ns (the send time without one) with
# these flags in its low 8 bits.
TXTIME_HAS_DEADLINE = 0x01
TXTIME_NON_DROPPABLE = 0x02
TXTIME_FRAME_START = 0x04
TXTIME_FRAME_END = 0x08
TXTIME_PRIO_SHIFT = 4
TXTIME_PRIO_MASK = 0x70
TXTIME_MARKER = 0x80
TXTIME_FLAGS_MASK = 0xff

# Linux values the socket module may lack.
_SO_TXTIME = getattr(socket, "SO_TXTIME", 61)
_SCM_TXTIME = _SO_TXTIME
_SO_TIMESTAMPING = getattr(socket, "SO_TIMESTAMPING", 37)
_CLOCK_MONOTONIC = 1
_SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
_SOF_TIMESTAMPING_SOFTWARE = 1 << 4
_SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
_SOF_TIMESTAMPING_TX_SCHED = 1 << 8
_SCM_TSTAMP_SND, _SCM_TSTAMP_SCHED = 0, 1
_SO_EE_ORIGIN_TIMESTAMPING = 4
_IP_RECVERR, _IPV6_RECVERR = 11, 25
_MSG_ERRQUEUE = 0x2000

# Queueing delay samples (as libhostqos): one message in 16 asks for its
# transmit timestamps; the last 256 samples are kept.
_SAMPLE_EVERY = 16
_KEEP_SAMPLES = 256
_SAMPLE_WAIT = 1.0

_TIMEOUT = 10.0
_MAX_ANSWER = 64 * 1024


@dataclass
class QosParams:
    """A qsocket's QoS (struct qos_params)."""

    class_name: str = ""          # "" = by priority, else class default
    priority: Optional[int] = None
    dscp: Optional[int] = None    # root or group hostqos only
    rate: int = 0                 # bit/s: fifo paces at it; dwcs, edf-*: served at it by the host
    scheduler: str = FIFO
    ipg_us: int = 0               # dwcs
    oln: int = 0
    old: int = 0
    dev: str = ""                 # qsockinit: the link
    egress_rate: str = ""         # qsockinit: e.g. "100mbit"

    def _wire(self) -> dict:
        w = {"scheduler": self.scheduler}
        if self.class_name:
            w["class"] = self.class_name
        if self.priority is not None:
            w["priority"] = self.priority
        if self.dscp is not None:
            w["dscp"] = self.dscp
        if self.rate:
            w["rate"] = self.rate
        if self.scheduler == DWCS:
            w.update(ipg_us=self.ipg_us, oln=self.oln, old=self.old)
        return w


@dataclass
class PacketFlags:
    """One message's attributes (struct packet_flags).

    deadline is absolute, in time.monotonic() seconds (CLOCK_MONOTONIC);
    None = none."""

    deadline: Optional[float] = None
    drop_priority: int = 0
    flags: int = 0                # NON_DROPPABLE | FRAME_START | FRAME_END


@dataclass
class QosInfo:
    """A qsocket's feedback (struct qos_info)."""

    id: int = 0
    class_name: str = ""
    dscp: int = 0
    scheduler: str = FIFO
    sent_msgs: int = 0
    sent_bytes: int = 0
    dropped_msgs: int = 0
    dropped_bytes: int = 0
    late_msgs: int = 0
    late_bytes: int = 0
    packets: int = 0
    bytes: int = 0
    rate_bps: int = 0
    # Time in the host's qdisc, from sampled transmit timestamps (ns).
    qdelay_mean_ns: int = 0
    qdelay_p99_ns: int = 0
    qdelay_samples: int = 0
    tcp_info: Optional[bytes] = None  # raw TCP_INFO for a TCP socket
    # The host's scheduler (dwcs, edf-*; datagram qsockets): sent predicted
    # late; dropped as unable to meet the deadline, or with their frame; the
    # bytes dropped; DWCS messages sent late with no loss left in the window.
    sched_late: int = 0
    sched_dropped: int = 0
    sched_frame_dropped: int = 0
    sched_dropped_bytes: int = 0
    sched_violations: int = 0


class QSockError(OSError):
    """A refused or failed call: errno and the reason."""


_STATUS_ERRNO = {400: _errno.EINVAL, 403: _errno.EPERM, 404: _errno.ENOENT,
                 409: _errno.EEXIST, 413: _errno.EMSGSIZE, 429: _errno.EAGAIN,
                 503: _errno.EAGAIN}


class _State:
    def __init__(self, p: QosParams, txtime: bool = False):
        self.lock = threading.Lock()
        self.reset(p, txtime)
        self.sent_msgs = self.sent_bytes = 0
        self.dropped_msgs = self.dropped_bytes = 0
        self.late_msgs = self.late_bytes = 0
        self.ts = _Tstamps()

    def reset(self, p: QosParams, txtime: bool = False):
        self.scheduler = p.scheduler
        self.rate = p.rate if p.scheduler == FIFO else 0  # dwcs, edf-*: the host serves them at it
        self.txtime = txtime
        self.tat = 0.0
        self.in_frame = False
        self.frame_drop = False


class _Tstamps:
    """Queueing delay on the host from the kernel's software transmit
    timestamps (SO_TIMESTAMPING): a sampled message asks for its time of
    entering the qdisc (SCM_TSTAMP_SCHED) and of leaving it to the driver
    (SCM_TSTAMP_SND); the difference is a sample. One sample at a time,
    read from the error queue without waiting at the next send or qinfo;
    one whose reports do not come within a second is abandoned."""

    def __init__(self):
        self.enabled = self.failed = self.outstanding = False
        self.since = 0.0
        self.sched = self.snd = 0
        self.count = 0
        self.samples: list = []
        self.next = 0
        self.ewma = 0

    def want(self, s: socket.socket) -> bool:
        if self.failed or self.outstanding:
            return False
        self.count += 1
        if self.count % _SAMPLE_EVERY != 1:
            return False
        if not self.enabled:
            try:
                s.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING,
                             _SOF_TIMESTAMPING_SOFTWARE | _SOF_TIMESTAMPING_OPT_TSONLY)
            except OSError:
                self.failed = True
                return False
            self.enabled = True
        self.outstanding, self.since, self.sched, self.snd = True, time.monotonic(), 0, 0
        return True

    def drain(self, s: socket.socket) -> None:
        while self.outstanding:
            try:
                _, anc, _, _ = s.recvmsg(0, 512, _MSG_ERRQUEUE | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                if time.monotonic() - self.since > _SAMPLE_WAIT:
                    self.outstanding = False
                return
            except OSError:
                self.outstanding = False
                return
            t, info = 0, -1
            for level, typ, data in anc:
                if level == socket.SOL_SOCKET and typ == _SO_TIMESTAMPING and len(data) >= 16:
                    sec, nsec = struct.unpack_from("=qq", data)
                    t = sec * 1_000_000_000 + nsec
                elif ((level == socket.SOL_IP and typ == _IP_RECVERR) or
                      (level == socket.SOL_IPV6 and typ == _IPV6_RECVERR)) and len(data) >= 16:
                    _, origin, _, _, _, ee_info = struct.unpack_from("=IBBBBI", data)
                    if origin == _SO_EE_ORIGIN_TIMESTAMPING:
                        info = ee_info
            if info == _SCM_TSTAMP_SCHED:
                self.sched = t
            elif info == _SCM_TSTAMP_SND:
                self.snd = t
            if self.sched and self.snd:
                self.add(max(self.snd - self.sched, 0))
                self.outstanding = False

    def add(self, d: int) -> None:
        if len(self.samples) < _KEEP_SAMPLES:
            self.samples.append(d)
        else:
            self.samples[self.next] = d
        self.next = (self.next + 1) % _KEEP_SAMPLES
        self.ewma = d if not self.ewma else self.ewma + (d - self.ewma) // 8

    def summary(self):
        """Mean and 99th percentile (ns) of the kept samples, and their number."""
        n = len(self.samples)
        if not n:
            return 0, 0, 0
        srt = sorted(self.samples)
        k = (n * 99 + 99) // 100
        return sum(srt) // n, srt[max(k, 1) - 1], n


def txtime_word(pf: Optional[PacketFlags], now_ns: int) -> int:
    """The SCM_TXTIME value of a message with attributes pf sent at now_ns
    (CLOCK_MONOTONIC ns): the TXTIME_* encoding."""
    dl = round(pf.deadline * 1e9) if pf is not None and pf.deadline is not None else 0
    w = ((dl if dl > 0 else now_ns) & ~TXTIME_FLAGS_MASK) | TXTIME_MARKER
    if dl > 0:
        w |= TXTIME_HAS_DEADLINE
    if pf is not None:
        if pf.flags & NON_DROPPABLE:
            w |= TXTIME_NON_DROPPABLE
        if pf.flags & FRAME_START:
            w |= TXTIME_FRAME_START
        if pf.flags & FRAME_END:
            w |= TXTIME_FRAME_END
        w |= (pf.drop_priority << TXTIME_PRIO_SHIFT) & TXTIME_PRIO_MASK
    return w & 0xFFFF_FFFF_FFFF_FFFF


def _want_txtime(op: str, fd: int, scheduler: str) -> bool:
    """Whether qsocket fd passes its messages' attributes to the kernel: a
    datagram socket whose scheduler is not fifo, which gets SO_TXTIME
    (CLOCK_MONOTONIC) before the daemon is asked. The kernel cannot clear
    SO_TXTIME: back to fifo, no SCM_TXTIME is passed."""
    if scheduler == FIFO:
        return False
    so = socket.socket(fileno=os.dup(fd))
    try:
        if so.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) != socket.SOCK_DGRAM:
            return False
        try:
            so.setsockopt(socket.SOL_SOCKET, _SO_TXTIME, struct.pack("=iI", _CLOCK_MONOTONIC, 0))
        except OSError as e:
            raise QSockError(e.errno, f"{op}: enable SO_TXTIME (CLOCK_MONOTONIC) for the messages' "
                                      f"attributes: {e.strerror}") from None
        return True
    finally:
        so.close()


_states: dict = {}
_states_lock = threading.Lock()


def _fd(s: Union[socket.socket, int]) -> int:
    return s if isinstance(s, int) else s.fileno()


def _daemon_socket() -> str:
    return os.environ.get("HOSTQOS_SOCKET") or DEFAULT_SOCKET


def _request(op: str, method: str, path: str, body: dict, fd: int = -1) -> dict:
    data = json.dumps(body).encode()
    req = (f"{method} {path} HTTP/1.1\r\nHost: hostqosd\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(_TIMEOUT)
    try:
        try:
            c.connect(_daemon_socket())
        except OSError as e:
            raise QSockError(e.errno, f"{op}: connect to hostqosd at {_daemon_socket()}: {e.strerror} "
                                      "(is hostqosd running? $HOSTQOS_SOCKET names another socket)") from None
        if fd >= 0:
            n = socket.send_fds(c, [req], [fd])
            if n < len(req):
                c.sendall(req[n:])
        else:
            c.sendall(req)
        ans = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            ans += chunk
            if len(ans) > _MAX_ANSWER:
                raise QSockError(_errno.EMSGSIZE, f"{op}: hostqosd's answer is too long")
    finally:
        c.close()
    head, _, payload = ans.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise QSockError(_errno.EPROTO, f"{op}: hostqosd's answer is not HTTP") from None
    if any(h.lower().startswith("transfer-encoding:") and "chunked" in h.lower() for h in lines[1:]):
        payload = _dechunk(payload)
    try:
        doc = json.loads(payload or b"{}")
    except ValueError:
        doc = {"error": payload.decode(errors="replace")}
    if status >= 300:
        msg = doc.get("error", "refused by hostqosd") if isinstance(doc, dict) else str(doc)
        fields = doc.get("fields") if isinstance(doc, dict) else None
        if fields:
            f = fields[0]
            msg = f'field {f.get("Field")} = "{f.get("Value")}": {f.get("Reason")}' + (
                f'; {f["Fix"]}' if f.get("Fix") else "")
        raise QSockError(_STATUS_ERRNO.get(status, _errno.EIO), f"{op}: {msg}")
    return doc


def _dechunk(b: bytes) -> bytes:
    out = b""
    while b:
        size, _, rest = b.partition(b"\r\n")
        n = int(size.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


def qsockinit(p: QosParams) -> None:
    """Prepares link p.dev for qsockets (root or group hostqos)."""
    body = {"link": p.dev}
    if p.egress_rate:
        body["egress_rate"] = p.egress_rate
    _request("qsockinit", "POST", "/v1/qsockets/init", body)


def qattach(s: Union[socket.socket, int], p: QosParams) -> dict:
    """Makes the open socket s a qsocket with p, without reconnecting."""
    fd = _fd(s)
    txtime = _want_txtime("qattach", fd, p.scheduler)
    q = _request("qattach", "POST", "/v1/qsockets", p._wire(), fd)
    with _states_lock:
        _states[fd] = _State(p, txtime)
    return q


def qsocket(family: int, type: int, proto: int, p: QosParams) -> socket.socket:
    """socket() that is a qsocket with p."""
    s = socket.socket(family, type, proto)
    try:
        qattach(s, p)
    except BaseException:
        s.close()
        raise
    return s


def qchange(s: Union[socket.socket, int], p: QosParams) -> dict:
    """Gives qsocket s new QoS, effective at its next packet."""
    fd = _fd(s)
    txtime = _want_txtime("qchange", fd, p.scheduler)
    q = _request("qchange", "PATCH", "/v1/qsockets", p._wire(), fd)
    with _states_lock:
        st = _states.get(fd)
        if st is None:
            _states[fd] = _State(p, txtime)
        else:
            with st.lock:
                st.reset(p, txtime)
    return q


def qinfo(s: Union[socket.socket, int]) -> QosInfo:
    """Reads qsocket s's feedback."""
    fd = _fd(s)
    d = _request("qinfo", "POST", "/v1/qsockets/info", {}, fd)
    info = QosInfo(id=d.get("id", 0), class_name=d.get("class", ""), dscp=d.get("dscp", 0),
                   scheduler=d.get("scheduler", FIFO), packets=d.get("packets", 0),
                   bytes=d.get("bytes", 0), rate_bps=d.get("rate", 0),
                   sched_late=d.get("late", 0), sched_dropped=d.get("late_dropped", 0),
                   sched_frame_dropped=d.get("frame_dropped", 0), sched_dropped_bytes=d.get("dropped_bytes", 0),
                   sched_violations=d.get("violations", 0))
    st = _states.get(fd)
    so = socket.socket(fileno=os.dup(fd))
    try:
        if st is not None:
            with st.lock:
                st.ts.drain(so)
                info.sent_msgs, info.sent_bytes = st.sent_msgs, st.sent_bytes
                info.dropped_msgs, info.dropped_bytes = st.dropped_msgs, st.dropped_bytes
                info.late_msgs, info.late_bytes = st.late_msgs, st.late_bytes
                info.qdelay_mean_ns, info.qdelay_p99_ns, info.qdelay_samples = st.ts.summary()
        if so.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) == socket.IPPROTO_TCP:
            info.tcp_info = so.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    finally:
        so.close()
    return info


def _decide(st: _State, pf: Optional[PacketFlags], now: float) -> bool:
    """The scheduler's decision at the source: True send, False drop."""
    if st.scheduler != EDF_LOSSY or pf is None:
        return True
    # With the host's scheduler deciding (txtime), only what is already too
    # late: the host predicts by band and backlog, which the socket's own
    # queueing delay does not know.
    qdelay = 0 if st.txtime else st.ts.ewma / 1e9
    late = pf.deadline is not None and now + qdelay > pf.deadline
    if pf.flags & FRAME_START:
        st.frame_drop = late
        st.in_frame = not (pf.flags & FRAME_END)
        drop = late
    elif st.in_frame:
        drop = st.frame_drop
        if pf.flags & FRAME_END:
            st.in_frame = False
    else:
        drop = late
    return not drop or bool(pf.flags & NON_DROPPABLE)


def qsendto(s: socket.socket, data: bytes, flags: int = 0, address=None,
            pflags: Optional[PacketFlags] = None) -> int:
    """sendto() with a message's attributes. A message the scheduler drops
    raises QSockError(ETIME) and is counted."""
    if pflags is not None and not 0 <= pflags.drop_priority <= DROP_PRIORITY_MAX:
        raise QSockError(_errno.EINVAL, f"qsend: PacketFlags.drop_priority {pflags.drop_priority} is out of range: "
                                        f"use 0 (dropped last) … {DROP_PRIORITY_MAX} (dropped first)")
    st = _states.get(s.fileno())
    if st is None:
        return s.sendto(data, flags, address) if address is not None else s.send(data, flags)
    now = time.monotonic()
    with st.lock:
        st.ts.drain(s)
        if not _decide(st, pflags, now):
            st.dropped_msgs += 1
            st.dropped_bytes += len(data)
            raise QSockError(_errno.ETIME, "qsend: the message was dropped by the socket's edf-lossy scheduler: "
                                           "it cannot meet its deadline")
        wait = 0.0
        if st.rate:
            start = max(st.tat, now)
            wait = start - now
            st.tat = start + len(data) * 8 / st.rate
        sample = st.ts.want(s)
        txtime = st.txtime
    if wait > 0:
        time.sleep(wait)
    anc = []
    if sample:
        anc.append((socket.SOL_SOCKET, _SO_TIMESTAMPING,
                    struct.pack("=I", _SOF_TIMESTAMPING_TX_SCHED | _SOF_TIMESTAMPING_TX_SOFTWARE)))
    if txtime:
        anc.append((socket.SOL_SOCKET, _SCM_TXTIME, struct.pack("=Q", txtime_word(pflags, time.monotonic_ns()))))
    try:
        if anc:
            n = s.sendmsg([data], anc, flags, address) if address is not None else s.sendmsg([data], anc, flags)
        else:
            n = s.sendto(data, flags, address) if address is not None else s.send(data, flags)
    except BaseException:
        if sample:
            with st.lock:
                st.ts.outstanding = False
        raise
    with st.lock:
        st.sent_msgs += 1
        st.sent_bytes += n
        if pflags is not None and pflags.deadline is not None and time.monotonic() > pflags.deadline:
            st.late_msgs += 1
            st.late_bytes += n
    return n


def qsend(s: socket.socket, data: bytes, flags: int = 0, pflags: Optional[PacketFlags] = None) -> int:
    """send() with a message's attributes."""
    return qsendto(s, data, flags, None, pflags)


def _forget(fd: int) -> None:
    with _states_lock:
        _states.pop(fd, None)


def qdetach(s: Union[socket.socket, int]) -> None:
    """Makes qsocket s an ordinary socket again; it stays open."""
    fd = _fd(s)
    _request("qdetach", "POST", "/v1/qsockets/detach", {}, fd)
    _forget(fd)


def qclose(s: Union[socket.socket, int]) -> None:
    """Closes qsocket s (the host forgets it with the socket)."""
    fd = _fd(s)
    _forget(fd)
    if isinstance(s, int):
        os.close(s)
    else:
        s.close()
