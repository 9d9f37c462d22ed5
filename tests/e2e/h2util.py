"""HTTP/2 clients for the e2e suite.

H2 speaks HTTP/2 with Python's h2 (Debian python3-h2), over cleartext (prior
knowledge) or TLS (ALPN h2), and lets a test misbehave: send header blocks
h2 itself would refuse, raw frames (hyperframe) and floods, keep a window
shut.  Every read is bounded.  Helpers run nghttp, h2load and curl, bounded
too.  Loopback only.
"""

import socket
import ssl
import struct
import subprocess
import time

import h2.config
import h2.connection
import h2.errors
import h2.exceptions
import h2.events
import h2.settings
from hyperframe import frame as hf

NGHTTP = "/usr/bin/nghttp"
H2LOAD = "/usr/bin/h2load"
CURL = "/usr/bin/curl"
CERTUTIL = "/usr/bin/certutil"  # Debian libnss3-tools

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def run(argv, timeout=60, check=True, input=None):
    p = subprocess.run([str(a) for a in argv], capture_output=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s%s" % (" ".join(map(str, argv)), p.returncode,
                                                    p.stdout.decode(errors="replace"),
                                                    p.stderr.decode(errors="replace")))
    return p


class Stream:
    def __init__(self, sid):
        self.sid = sid
        self.headers = None      # [(name, value)] of the final response, bytes
        self.interim = []        # [[(name, value)]] of 1xx responses
        self.data = bytearray()
        self.trailers = None
        self.ended = False
        self.reset = None        # error code of an RST_STREAM from the server

    @property
    def status(self):
        for n, v in self.headers or []:
            if n == b":status":
                return int(v)
        return None

    def header(self, name):
        name = name.lower().encode() if isinstance(name, str) else name
        for n, v in self.headers or []:
            if n == name:
                return v.decode()
        return None

    @property
    def done(self):
        return self.ended or self.reset is not None

    def __repr__(self):
        return "<stream %d status=%s len=%d ended=%s reset=%s>" % (
            self.sid, self.status, len(self.data), self.ended, self.reset)


class H2:
    """One HTTP/2 connection to surogatd.  auto_window=False leaves every window as
    the server's data shrinks it (the client reads nothing).  prefix: bytes sent first,
    before TLS and the preface (a PROXY header)."""

    def __init__(self, port, tls_ca=None, sni="a.test", settings=None, timeout=10.0,
                 auto_window=True, preface=True, prefix=b""):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if prefix:
            self.sock.sendall(prefix)
        if tls_ca is not None:
            ctx = ssl.create_default_context(cafile=str(tls_ca))
            ctx.set_alpn_protocols(["h2"])
            self.sock = ctx.wrap_socket(self.sock, server_hostname=sni)
            assert self.sock.selected_alpn_protocol() == "h2", self.sock.selected_alpn_protocol()
        self.timeout = timeout
        self.auto_window = auto_window
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None,
                                        validate_outbound_headers=False,
                                        normalize_outbound_headers=False,
                                        validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(cfg)
        self.streams = {}
        self.goaway = None       # (error code, last stream id)
        self.closed = False
        self.settings = {}       # what the server said
        self.pings = 0
        self.hold = set()        # streams whose window stays shut (the connection's opens)
        if preface:
            self.conn.initiate_connection()
            if settings:
                self.conn.update_settings(settings)
            self.flush()

    # -- sending ---------------------------------------------------------------

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def raw(self, data):
        """Bytes straight onto the socket (frames h2 would not send)."""
        self.sock.sendall(data)

    def request(self, path="/", method="GET", headers=(), body=None, end=True, authority="a.test",
                scheme="http", extra_pseudo=()):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", scheme), (":path", path)]
        if authority is not None:
            hdrs.insert(1, (":authority", authority))
        hdrs += list(extra_pseudo) + list(headers)
        self.streams[sid] = Stream(sid)
        self.conn.send_headers(sid, hdrs, end_stream=end and body is None)
        if body is not None:
            self.send_body(sid, body, end=end)
        self.flush()
        return sid

    def headers_block(self, block, end=True):
        """A request of exactly these fields, in this order (malformed ones included)."""
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = Stream(sid)
        self.conn.send_headers(sid, block, end_stream=end)
        self.flush()
        return sid

    def send_body(self, sid, body, end=True, timeout=None):
        """Body in frames as the windows allow, reading meanwhile (window updates)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        view = memoryview(body)
        while len(view) > 0:
            n = min(len(view), self.conn.local_flow_control_window(sid),
                    self.conn.max_outbound_frame_size)
            if n <= 0:
                assert time.monotonic() < deadline, "no window to send the body in"
                self.pump(0.5)
                st = self.streams.get(sid)
                if st is not None and st.reset is not None:
                    return
                continue
            self.conn.send_data(sid, bytes(view[:n]))
            view = view[n:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def reset(self, sid, code=h2.errors.ErrorCodes.CANCEL):
        self.conn.reset_stream(sid, code)
        self.flush()

    def ping(self, data=b"12345678"):
        self.conn.ping(data)
        self.flush()

    # -- receiving -------------------------------------------------------------

    def pump(self, timeout):
        """Read once (at most timeout seconds) and handle the events; False when closed."""
        if self.closed:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except (socket.timeout, TimeoutError):
            return True
        except (ConnectionResetError, ssl.SSLError, OSError):
            self.closed = True
            return False
        if not data:
            self.closed = True
            return False
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return False
        for ev in events:
            self.handle(ev)
        try:
            self.flush()
        except OSError:
            self.closed = True
        return not self.closed

    def handle(self, ev):
        st = self.streams.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived):
            st.headers = ev.headers
        elif isinstance(ev, h2.events.InformationalResponseReceived):
            st.interim.append(ev.headers)
        elif isinstance(ev, h2.events.TrailersReceived):
            st.trailers = ev.headers
        elif isinstance(ev, h2.events.DataReceived):
            st.data += ev.data
            n = ev.flow_controlled_length
            if n and ev.stream_id in self.hold:
                self.conn.increment_flow_control_window(n)  # the connection's, not the stream's
            elif n and self.auto_window:
                self.conn.acknowledge_received_data(n, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            st.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if st is not None:
                st.reset = ev.error_code
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = (ev.error_code, ev.last_stream_id)
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            for k, v in ev.changed_settings.items():
                self.settings[k] = v.new_value
        elif isinstance(ev, h2.events.PingAckReceived):
            self.pings += 1

    def wait(self, pred, timeout=None, what="a condition"):
        deadline = time.monotonic() + (timeout or self.timeout)
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %s" % what)
            if not self.pump(min(left, 0.5)) and not pred():
                raise AssertionError("connection closed waiting for %s (goaway %s)"
                                     % (what, self.goaway))
        return True

    def response(self, sid, timeout=None):
        st = self.streams[sid]
        self.wait(lambda: st.done, timeout, "stream %d" % sid)
        return st

    def get(self, path="/", **kw):
        return self.response(self.request(path, **kw))

    def wait_closed(self, timeout=None):
        """Read until the server closes; True if it did in time."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            if not self.pump(0.2):
                return True
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# -- raw frames ---------------------------------------------------------------------


def frame(f):
    return f.serialize()


def settings_frame(ack=False, **values):
    f = hf.SettingsFrame(0)
    if ack:
        f.flags.add("ACK")
    for k, v in values.items():
        f.settings[k] = v
    return f.serialize()


def raw_headers(sid, block, end_stream=True, end_headers=True):
    f = hf.HeadersFrame(sid)
    f.data = block
    if end_stream:
        f.flags.add("END_STREAM")
    if end_headers:
        f.flags.add("END_HEADERS")
    return f.serialize()


def continuation(sid, block, end_headers=False):
    f = hf.ContinuationFrame(sid)
    f.data = block
    if end_headers:
        f.flags.add("END_HEADERS")
    return f.serialize()


def rst_stream(sid, code=8):
    f = hf.RstStreamFrame(sid)
    f.error_code = code
    return f.serialize()


def window_update(sid, inc):
    f = hf.WindowUpdateFrame(sid)
    f.window_increment = inc
    return f.serialize()


def priority(sid, dep=0, weight=16):
    f = hf.PriorityFrame(sid)
    f.depends_on = dep
    f.stream_weight = weight
    return f.serialize()


def ping_frame(data=b"\0" * 8):
    f = hf.PingFrame(0)
    f.opaque_data = data
    return f.serialize()


def data_frame(sid, data=b"", end_stream=False):
    f = hf.DataFrame(sid)
    f.data = data
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()


def goaway_code(frames_bytes):
    """The error code of the first GOAWAY frame in bytes read raw, or None."""
    i = 0
    while i + 9 <= len(frames_bytes):
        length = int.from_bytes(frames_bytes[i:i + 3], "big")
        ftype = frames_bytes[i + 3]
        if ftype == 7 and i + 9 + 8 <= len(frames_bytes):
            return struct.unpack(">I", frames_bytes[i + 13:i + 17])[0]
        i += 9 + length
    return None


def encoder():
    """An HPACK encoder (hpack, as h2 uses)."""
    import hpack
    return hpack.Encoder()


class Raw:
    """A cleartext HTTP/2 connection spoken in raw frames (what h2 itself would refuse to
    send), the server's frames read back raw."""

    def __init__(self, port, settings=b"", timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(PREFACE + settings_frame() + settings)
        self.buf = bytearray()
        self.timeout = timeout

    def send(self, data):
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False  # the server closed meanwhile: what it sent is still to be read

    def read_until_closed(self, timeout=None):
        """Everything until the server closes; True if it did in time."""
        return self.read_for(timeout or self.timeout)

    def read_for(self, secs):
        """Read for secs seconds at most; True when the server closed meanwhile."""
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.sock.recv(1 << 16)
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return True
            if not d:
                return True
            self.buf += d
        return False

    def frames(self):
        """[(type, flags, stream id, payload)] read so far."""
        out, i, b = [], 0, bytes(self.buf)
        while i + 9 <= len(b):
            length = int.from_bytes(b[i:i + 3], "big")
            if i + 9 + length > len(b):
                break
            sid = int.from_bytes(b[i + 5:i + 9], "big") & 0x7fffffff
            out.append((b[i + 3], b[i + 4], sid, b[i + 9:i + 9 + length]))
            i += 9 + length
        return out

    def responses(self):
        """{stream id: {"status": int, "data": bytes, "ended": bool}} read so far (HPACK
        decoded in the order the blocks came)."""
        import hpack
        dec, out = hpack.Decoder(), {}
        for t, flags, sid, p in self.frames():
            if t == 1:
                if flags & 0x8:  # PADDED
                    p = p[1:len(p) - p[0]]
                if flags & 0x20:  # PRIORITY
                    p = p[5:]
                st = out.setdefault(sid, {"status": None, "data": b"", "ended": False})
                st["status"] = int(dict(dec.decode(p))[":status"])
                st["ended"] = st["ended"] or bool(flags & 0x1)
            elif t == 0 and sid in out:
                out[sid]["data"] += p
                out[sid]["ended"] = out[sid]["ended"] or bool(flags & 0x1)
        return out

    def goaway(self):
        """(error code, last stream id) of the server's first GOAWAY, or None."""
        for t, _, _, p in self.frames():
            if t == 7:
                return (struct.unpack(">I", p[4:8])[0], struct.unpack(">I", p[:4])[0])
        return None

    def rst(self, sid):
        """The error code of the server's RST_STREAM on sid, or None."""
        for t, _, s, p in self.frames():
            if t == 3 and s == sid:
                return struct.unpack(">I", p[:4])[0]
        return None

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
