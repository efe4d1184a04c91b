"""TestQSockets' Python datagram side: a qsocket with a per-message
scheduler passes each message's attributes to the host (SO_TXTIME,
SCM_TXTIME) and measures the queueing delay (qinfo's qdelay_*).

    python3 qsock_udp.py ADDR PORT CLASS [host]

Sends 48 messages with deadlines, frames, drop priorities (every 12th
non-droppable) under edf-lossless, checks a drop priority out of range is
refused, changes to fifo and sends 2 more, then prints qinfo. With
"host" (on a link with the qsocket scheduler), instead: a late frame the
host's scheduler must drop whole, and a non-droppable message it must
send late."""
import errno
import socket
import sys
import time

import hostqos

addr, port, cls = sys.argv[1], int(sys.argv[2]), sys.argv[3]

if len(sys.argv) > 4 and sys.argv[4] == "host":
    # At 100 kbit/s a 1200-byte message takes 99 ms of the qsocket
    # scheduler's class, so one due in 60 ms is predicted late (the source,
    # seeing no queue, sends it). A droppable frame of 3 is dropped whole
    # (its first message: late_dropped, the rest: frame_dropped); a
    # non-droppable message is sent, late.
    s = hostqos.qsocket(socket.AF_INET, socket.SOCK_DGRAM, 0,
                        hostqos.QosParams(class_name=cls, scheduler=hostqos.EDF_LOSSY, rate=100_000))
    dl = time.monotonic() + 0.06
    for i, fl in enumerate((hostqos.FRAME_START, 0, hostqos.FRAME_END)):
        hostqos.qsendto(s, b"f%d" % i + b"." * 1198, 0, (addr, port),
                        hostqos.PacketFlags(deadline=dl, flags=fl, drop_priority=3))
    hostqos.qsendto(s, b"nd" + b"." * 1198, 0, (addr, port),
                    hostqos.PacketFlags(deadline=time.monotonic() + 0.06, flags=hostqos.NON_DROPPABLE))
    info = hostqos.qinfo(s)
    print(f"python udp host sent={info.sent_msgs} dropped={info.dropped_msgs} packets={info.packets} "
          f"late_dropped={info.sched_dropped} frame_dropped={info.sched_frame_dropped} "
          f"dropped_bytes={info.sched_dropped_bytes} late={info.sched_late}")
    hostqos.qclose(s)
    sys.exit(0)
s = hostqos.qsocket(socket.AF_INET, socket.SOCK_DGRAM, 0,
                    hostqos.QosParams(class_name=cls, scheduler=hostqos.EDF_LOSSLESS))
for i in range(48):
    pf = hostqos.PacketFlags(deadline=time.monotonic() + 1.0, drop_priority=i % 8,
                             flags=hostqos.FRAME_START | hostqos.FRAME_END |
                             (hostqos.NON_DROPPABLE if i % 12 == 0 else 0))
    hostqos.qsendto(s, b"m%02d" % i + b"." * 197, 0, (addr, port), pf)
    time.sleep(0.002)
try:
    hostqos.qsendto(s, b"x", 0, (addr, port), hostqos.PacketFlags(drop_priority=9))
    refused = "no"
except hostqos.QSockError as e:
    refused = "EINVAL" if e.errno == errno.EINVAL else str(e.errno)
hostqos.qchange(s, hostqos.QosParams(class_name=cls))
for i in range(2):
    hostqos.qsendto(s, b"fifo" + b"." * 196, 0, (addr, port))
time.sleep(0.05)
info = hostqos.qinfo(s)
print(f"python udp qinfo class={info.class_name} scheduler={info.scheduler} sent={info.sent_msgs} "
      f"dropped={info.dropped_msgs} packets={info.packets} samples={info.qdelay_samples} "
      f"mean_ns={info.qdelay_mean_ns} p99_ns={info.qdelay_p99_ns} host_late={info.sched_late} "
      f"host_dropped={info.sched_dropped + info.sched_frame_dropped} drop_priority_9={refused}")
hostqos.qclose(s)
