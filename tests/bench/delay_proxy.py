#!/usr/bin/env python3
"""A TCP proxy that adds a fixed round trip: every chunk read from one side
is written to the other RTT/2 after it arrived, in order, both ways (this
kernel has no netem). Threads, not asyncio: epoll's millisecond timeouts would
round a 0.1 ms delay up to 1 ms; a thread sleeps until the chunk's deadline
(clock_nanosleep, tens of microseconds of slack) and spins the last 50 us.

Use as a library (shard_scale_bench.py) or alone:
  delay_proxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT RTT_MS
"""
import queue
import socket
import sys
import threading
import time

_SPIN_S = 50e-6


def _wait_until(deadline):
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        if left > _SPIN_S:
            time.sleep(left - _SPIN_S)


def _pump(src, dst, delay_s):
    """Copies src to dst, each chunk delayed by delay_s; closes dst's write
    side when src ends."""
    chunks = queue.SimpleQueue()

    def reader():
        try:
            while True:
                data = src.recv(1 << 20)
                chunks.put((time.perf_counter() + delay_s, data))
                if not data:
                    return
        except OSError:
            chunks.put((0, b""))

    threading.Thread(target=reader, daemon=True).start()
    try:
        while True:
            deadline, data = chunks.get()
            if not data:
                break
            _wait_until(deadline)
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class DelayProxy:
    """Listens on 127.0.0.1:port (0: a free one) and forwards every
    connection to target with rtt_ms added. stop() closes the listener."""

    def __init__(self, target_host, target_port, rtt_ms, port=0):
        self.target = (target_host, target_port)
        self.delay_s = rtt_ms / 2000.0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_pump, args=(upstream, client, self.delay_s), daemon=True)
        back.start()
        _pump(client, upstream, self.delay_s)
        back.join()
        client.close()
        upstream.close()

    def stop(self):
        self.listener.close()


if __name__ == "__main__":
    host, port = sys.argv[2].rsplit(":", 1)
    p = DelayProxy(host, int(port), float(sys.argv[3]), int(sys.argv[1]))
    print("delay proxy on 127.0.0.1:%d -> %s, +%s ms round trip" % (p.port, sys.argv[2], sys.argv[3]),
          flush=True)
    threading.Event().wait()
