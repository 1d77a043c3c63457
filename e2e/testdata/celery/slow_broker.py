"""A broker slow to answer: relays LISTEN_PORT to 127.0.0.1:BROKER_PORT, each
connection only after DELAY seconds, as RabbitMQ answered the AMQP handshake
on a loaded machine (docs/results/ci-runs.md, eleventh stop). Not used by the
suite; it reproduces that run's failed send by hand:

  /usr/bin/python3 slow_broker.py LISTEN_PORT BROKER_PORT DELAY
"""
import socket
import sys
import threading
import time


def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def handle(c, broker_port, delay):
    time.sleep(delay)
    u = socket.create_connection(('127.0.0.1', broker_port))
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    pipe(u, c)


def main():
    listen_port, broker_port, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', listen_port))
    s.listen()
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c, broker_port, delay), daemon=True).start()


if __name__ == '__main__':
    main()
