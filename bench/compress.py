#!/usr/bin/python3
"""
compress -- bytes on the wire and CPU per request for a 100 KiB HTML page
and a 100 KiB CSS file sent br, zstd, gzip and identity by surogat's
static-file backend (-b /DIR), beside nginx with `gzip on` and
`gzip_static on`; same pinning as passthrough.py, one run.

  server under test   core 0   (taskset -c 0)
  wrk                 core 1   (taskset -c 1)

Servers, each on its own copy of the files:

  surogat             compressing once per file and coding, keeping the
                      copy (sfb_compress_cache; compress_formats br,zstd,gzip)
  surogat-static      the same files with precompressed siblings beside
                      them (.br at quality 11, .zst at 19, .gz at 9), sent
                      as they are (sfb_precompressed), sendfile for large ones
  nginx               gzip on: compressed again for every request
  nginx-static        gzip_static on with the same .gz siblings (nginx in
                      Debian 12 has no brotli or zstd module: br and zstd
                      clients get identity from it, shown as such)

For each file and Accept-Encoding: requests/s, the bytes each response
takes on the wire (wrk's bytes read over its requests: head and body), and
the server's CPU per request (its ticks over the requests).  Before
measuring, every answer is decoded and compared with the file.

A second table measures the cost of the codecs themselves in this process
(Python's bindings to the same zlib, brotli and zstd libraries): the size
and CPU of compressing each file at each level, and of decoding -- what a
cached object costs when stored, and what a transcode costs per request
for a client that takes none of the stored codings.

Every process it starts is stopped on exit.  Traffic goes to 127.0.0.1
only.  Needs python3-brotli and python3-zstandard (scripts/deps.sh).
"""

import argparse
import atexit
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

import brotli
import zstandard

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import passthrough as pt  # noqa: E402 -- process handling, /proc readers, wrk parsing
from esi_gzip import page_bytes  # noqa: E402 -- bench/gzip.py's page

REPO = pt.REPO
log = pt.log
FILES = {"/page.html": "text/html", "/style.css": "text/css"}
CODINGS = ["br", "zstd", "gzip", "identity"]


def css_bytes(size):
    """A stylesheet as frameworks write them: selectors and properties repeat, values vary."""
    rnd = random.Random(200)
    props = ["color: #%06x", "background-color: #%06x", "margin: %dpx %dpx",
             "padding: %dpx", "font-size: %d.%drem", "border: 1px solid #%06x",
             "display: flex", "align-items: center", "line-height: 1.%d",
             "transition: opacity %dms ease-in-out", "z-index: %d", "width: %d%%"]
    parts = ["card", "nav", "btn", "item", "header", "footer", "grid", "col", "row", "modal"]
    out, n = ["/* bench stylesheet */\n"], 0
    while n < size:
        sel = ", ".join(f".{rnd.choice(parts)}-{rnd.choice(parts)}--{rnd.randrange(40)}"
                        + rnd.choice(["", ":hover", " > a", "::before"])
                        for _ in range(rnd.randrange(1, 3)))
        decl = "".join("  " + (p % tuple(rnd.randrange(1, 999) if "#" not in p
                                         else rnd.randrange(0xffffff)
                                         for _ in range(p.count("%") - p.count("%%") * 2)))
                       + ";\n" for p in rnd.sample(props, rnd.randrange(2, 6)))
        s = f"{sel} {{\n{decl}}}\n"
        out.append(s)
        n += len(s)
    return "".join(out).encode()[:size]


def gz_compress(content, level):
    """gzip by zlib: the stdlib's gzip module is shadowed here by bench/gzip.py."""
    c = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return c.compress(content) + c.flush()


def decode(coding, body):
    if coding in (None, "identity"):
        return body
    if coding == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(body) + d.flush()
        if not d.eof or d.unused_data:
            raise ValueError("not one gzip stream")
        return out
    if coding == "br":
        return brotli.decompress(body)
    if coding == "zstd":
        return zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 26)
    raise ValueError(coding)


def get(port, path, coding):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers={} if coding == "identity"
                  else {"Accept-Encoding": coding})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def check_server(srv, files):
    """Every answer decodes to the file; returns {(path, coding): coding sent}."""
    sent = {}
    for path, content in files.items():
        for coding in CODINGS:
            for _ in range(2):  # the first may make the copy
                status, h, body = get(srv.port, path, coding)
            ce = h.get("content-encoding", "identity")
            if status != 200 or decode(ce, body) != content:
                raise SystemExit(f"{srv.name}: {path} {coding}: {status} {h}")
            sent[(path, coding)] = ce
    return sent


def make_root(workdir, name, files, siblings):
    root = os.path.join(workdir, name)
    os.makedirs(root)
    os.chmod(root, 0o755)
    for path, content in files.items():
        dest = root + path
        with open(dest, "wb") as f:
            f.write(content)
        if siblings:
            with open(dest + ".br", "wb") as f:
                f.write(brotli.compress(content, quality=11, mode=brotli.MODE_TEXT))
            with open(dest + ".zst", "wb") as f:
                f.write(zstandard.ZstdCompressor(level=19, write_checksum=True).compress(content))
            with open(dest + ".gz", "wb") as f:
                f.write(gz_compress(content, 9))
        # siblings not older than the file
        for p in (dest, dest + ".br", dest + ".zst", dest + ".gz"):
            if os.path.exists(p):
                os.chmod(p, 0o644)
                os.utime(p, (time.time(), time.time()))
    return root


def start_surogat(args, workdir, name, root):
    d = os.path.join(workdir, name + "-run")
    os.makedirs(d, exist_ok=True)
    port = pt.free_port()
    srv = pt.Server(name, port)
    srv.admin = f"127.0.0.1:{pt.free_port()}"
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", root, "-n", d, "-s", "malloc,16m",
            "-T", srv.admin,
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "timeout_idle=60s", "-p", "compress_formats=br,zstd,gzip",
            "-p", f"gzip_level={args.level}"]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid
    pt.STARTED.append(srv.proc)
    return srv


def server_ticks(srv):
    return sum(pt.proc_ticks(p) or 0 for p in [srv.proc.pid] + pt.descendants(srv.proc.pid))


def measure(args, srv, path, coding):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(args.conns), "-d", f"{args.duration}s", "--timeout", "5s", "--latency"]
    if coding != "identity":
        argv += ["-H", f"Accept-Encoding: {coding}"]
    argv.append(f"http://127.0.0.1:{srv.port}{path}")
    if args.warmup > 0:
        warm = list(argv)
        warm[warm.index("-d") + 1] = f"{args.warmup}s"
        subprocess.run(warm, capture_output=True, timeout=args.warmup + 60)
    t0 = server_ticks(srv)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pt.STARTED.append(proc)
    try:
        out, _ = proc.communicate(timeout=args.duration + 60)
    except subprocess.TimeoutExpired:
        pt.stop(proc)
        out = b"wrk: did not finish in time\n"
    pt.STARTED.remove(proc)
    ticks = server_ticks(srv) - t0
    text = out.decode(errors="replace")
    r = pt.parse_wrk(text)
    r["argv"] = argv
    m = __import__("re").search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)(B|KB|MB|GB) read", text)
    if m and r.get("requests"):
        scale = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}[m.group(3)]
        r["wire_bytes"] = float(m.group(2)) * scale / int(m.group(1))
    r["cpu_us_per_req"] = (ticks / pt.CLK_TCK * 1e6 / r["requests"]) if r.get("requests") else None
    if not srv.check_alive():
        r["error"] = srv.dead
    return r


def codec_costs(files, reps):
    """Size and CPU of each codec on each file, in this process."""
    rows = []
    levels = {"gzip": [1, 6, 9], "br": [1, 4, 5, 6, 9, 11], "zstd": [1, 3, 6, 12, 19]}
    for path, content in files.items():
        for coding, lv in levels.items():
            for level in lv:
                if coding == "gzip":
                    enc = lambda: gz_compress(content, level)  # noqa: E731
                elif coding == "br":
                    enc = lambda: brotli.compress(content, quality=level,  # noqa: E731
                                                  mode=brotli.MODE_TEXT)
                else:
                    cz = zstandard.ZstdCompressor(level=level, write_checksum=True)
                    enc = lambda: cz.compress(content)  # noqa: E731
                n = reps if level < 9 or coding == "gzip" else max(3, reps // 20)
                out = enc()
                t0 = time.process_time()
                for _ in range(n):
                    enc()
                comp_ms = (time.process_time() - t0) / n * 1000
                t0 = time.process_time()
                for _ in range(reps):
                    decode(coding, out)
                dec_ms = (time.process_time() - t0) / reps * 1000
                rows.append({"file": path, "coding": coding, "level": level, "size": len(out),
                             "ratio": len(content) / len(out), "compress_ms": comp_ms,
                             "decode_ms": dec_ms})
    return rows


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build", "surogatd"))
    ap.add_argument("--quick", action="store_true", help="smoke mode: 2 s runs, no warmup")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of warmup before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections")
    ap.add_argument("--size", type=int, default=100 * 1024, help="size of each file")
    ap.add_argument("--page", help="an HTML file to use instead of the generated page")
    ap.add_argument("--css", help="a CSS file to use instead of the generated stylesheet")
    ap.add_argument("--level", type=int, default=6,
                    help="gzip level for both servers' on-the-fly gzip (nginx gzip_comp_level)")
    ap.add_argument("--only", help="comma-separated subset of the servers")
    ap.add_argument("--codec-reps", type=int, default=200)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=50)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.codec_reps = 2, 0, 20
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    for tool in (args.wrk, args.nginx, args.surogatd, shutil.which("taskset")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing tool: {tool}")
    if os.cpu_count() < 2:
        log("only one CPU: everything on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0
    args.nofile = 16384
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-bench-compress-", dir=base)
    os.chmod(workdir, 0o755)
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    files = {"/page.html": open(args.page, "rb").read() if args.page else page_bytes(args.size),
             "/style.css": open(args.css, "rb").read() if args.css else css_bytes(args.size)}
    servers = []
    only = set(args.only.split(",")) if args.only else None
    for name in ("surogat", "surogat-static", "nginx", "nginx-static"):
        if only and name not in only:
            continue
        root = make_root(workdir, name + "-root", files, siblings=name.endswith("static"))
        if name.startswith("surogat"):
            srv = start_surogat(args, workdir, name, root)
        else:
            srv = pt.start_nginx(args, name, "compress-nginx.conf.in", args.proxy_cpu, workdir,
                                 PORT=pt.free_port(), DOCROOT=root, LEVEL=args.level)
            pt.STARTED.append(srv.proc)
        srv.name = name
        pt.wait_ready(srv.proc, srv.port, "/page.html", len(files["/page.html"]), name)
        servers.append((srv, check_server(srv, files)))
        log(f"{name} on 127.0.0.1:{srv.port}, answers checked")
    results = []
    for path in files:
        for coding in CODINGS:
            for srv, sent in servers:
                r = measure(args, srv, path, coding)
                r.update(server=srv.name, file=path, asked=coding, sent=sent[(path, coding)])
                results.append(r)
                log(f"{path:11} {coding:8} {srv.name:15} sent {r['sent']:8} "
                    f"{pt.fmt_num(r.get('rps')):>9} req/s  {r.get('wire_bytes') or 0:9.0f} B/resp  "
                    f"{r.get('cpu_us_per_req') or 0:7.1f} us CPU/req  non2xx {r['non2xx']}")
    costs = codec_costs(files, args.codec_reps)

    print()
    print(f"# page.html {len(files['/page.html'])} B ({args.page or 'generated'}), "
          f"style.css {len(files['/style.css'])} B ({args.css or 'generated'}), "
          f"{args.duration} s per run, {args.conns} connections, "
          f"servers on core {args.proxy_cpu}, wrk on core {args.client_cpu}")
    print()
    print("| file | Accept-Encoding | server | sent | req/s | bytes/response | CPU us/request |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['file']} | {r['asked']} | {r['server']} | {r['sent']} | "
              f"{pt.fmt_num(r.get('rps'))} | {r.get('wire_bytes') or 0:.0f} | "
              f"{r.get('cpu_us_per_req') or 0:.1f} |")
    print()
    print("| file | coding | level | bytes | ratio | compress ms | decode ms |")
    print("|---|---|---|---|---|---|---|")
    for c in costs:
        print(f"| {c['file']} | {c['coding']} | {c['level']} | {c['size']} | {c['ratio']:.2f} | "
              f"{c['compress_ms']:.2f} | {c['decode_ms']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "codecs": costs}, f, indent=1,
                      default=str)


if __name__ == "__main__":
    main()
