"""TestQSockets' Python side: an open TCP connection gets QoS by qattach,
without reconnecting.

    python3 qattach_tcp.py ADDR PORT CLASS

Connects, sends 5 segments, qattach(class), sends 5 more, prints the qinfo
packets and the TCP_INFO length."""
import socket
import sys
import time

import hostqos

addr, port, cls = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((addr, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(5):
    s.sendall(b"before" * 20)
    time.sleep(0.02)
hostqos.qattach(s, hostqos.QosParams(class_name=cls))
for i in range(5):
    hostqos.qsend(s, b"after!" * 20)
    time.sleep(0.02)
info = hostqos.qinfo(s)
print(f"python qinfo id={info.id} class={info.class_name} packets={info.packets} sent={info.sent_msgs} tcp_info={len(info.tcp_info or b'')}")
s.close()
