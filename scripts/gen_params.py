#!/usr/bin/env python3
"""Turn `surogatd -x params` into the parameter documentation.

The parameter table lives in include/surogat/tbl/params.h; surogatd prints
it with -x params, one paragraph per parameter:

    name
    <TAB>Type: count
    <TAB>Default: 2
    <TAB>Minimum: 1            (optional)
    <TAB>Maximum: 64           (optional)
    <TAB>Flags: restart        (or runtime, or reload)
    <TAB>Varnish: first_byte_timeout   (optional: Varnish's name for it)

    <TAB>The documentation, on one line.

From it this script writes the man page surogat-params(7) (--man) and the
sample configuration file etc/surogat.conf (--conf), and checks that a
committed etc/surogat.conf is still what it would write (--check-conf), so
the documentation cannot drift from the code.

    scripts/gen_params.py --conf etc/surogat.conf build/surogatd
    build/surogatd -x params | scripts/gen_params.py --man -
    scripts/gen_params.py --check-conf etc/surogat.conf build/surogatd

SUROGATD, when given, is run with -x params (and -V for the version shown
in the man page); without it the parameter text is read from stdin.
Python 3 standard library only.
"""
import argparse
import difflib
import re
import subprocess
import sys
import textwrap

CONF_WIDTH = 78

CONF_HEADER = """\
# surogat.conf -- parameters for surogatd, read with `surogatd -c FILE`
# (surogatd reads no configuration file unless -c names one).
#
# Every parameter is listed, commented out, with its default value.  To
# change one, remove the '#' in front of its "name = value" line.
#
# Syntax: one "name = value" per line; '#' starts a comment.  A value may
# be put in double quotes, inside which \\" and \\\\ are the escapes; quotes
# are needed for an empty value or one containing '#'.
# Sizes take the suffixes k, m, g, t (powers of 1024); durations take us,
# ms, s, m, h, d, w, y, and a bare number is seconds; booleans are on/off.
#
# Settings given with -p NAME=VALUE are applied after this file and win.
# "listen = ADDR:PORT" lines, as many as needed, add listen addresses with
# the syntax of -a, TLS included:
#   listen = :443,tls,cert=/etc/ssl/site.pem,key=/etc/ssl/site.key
# Parameters marked "runtime" can also be changed in a running daemon with
# `surogatctl param.set NAME VALUE`, and a reload (SIGHUP, `surogatctl
# reload`) applies this file's "runtime" and "reload" ones; the others are
# read at startup only.  Varnish's names for parameters (first_byte_timeout
# ...) are taken too, here, with -p and by param.set.
# See surogat-params(7) for the full reference.
#
# In the source tree this file is generated from include/surogat/tbl/params.h
# by scripts/gen_params.py; edit the table, not this file.
"""

class Param:
    def __init__(self, name):
        self.name = name
        self.type = None
        self.default = None
        self.minimum = None
        self.maximum = None
        self.live = None
        self.reload = False
        self.varnish = None
        self.doc = ""


def fail(msg):
    sys.stderr.write("gen_params.py: %s\n" % msg)
    sys.exit(2)


def parse(text):
    """Parse -x params output into a list of Param, in table order."""
    params = []
    cur = None
    in_doc = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip() == "":
            if cur is not None and cur.doc:
                in_doc = False
            elif cur is not None and cur.type is not None:
                in_doc = True
            continue
        if not line.startswith("\t"):
            if not re.fullmatch(r"[a-z][a-z0-9_]*", line):
                fail("line %d: expected a parameter name, got %r" % (lineno, line))
            cur = Param(line)
            params.append(cur)
            in_doc = False
            continue
        if cur is None:
            fail("line %d: text before the first parameter name" % lineno)
        body = line[1:]
        if in_doc or cur.doc:
            cur.doc = (cur.doc + " " + body.strip()).strip()
            continue
        key, sep, val = body.partition(": ")
        if not sep:
            fail("line %d: expected 'Key: value', got %r" % (lineno, body))
        if key == "Type":
            cur.type = val
        elif key == "Default":
            cur.default = "" if val == "(empty)" else val
        elif key == "Minimum":
            cur.minimum = val
        elif key == "Maximum":
            cur.maximum = val
        elif key == "Flags":
            if val not in ("runtime", "restart", "reload"):
                fail("line %d: unknown flags %r" % (lineno, val))
            cur.live = val == "runtime"
            cur.reload = val == "reload"
        elif key == "Varnish":
            cur.varnish = val
        else:
            fail("line %d: unknown key %r" % (lineno, key))
    if not params:
        fail("no parameters in the input")
    for p in params:
        if p.type is None or p.default is None or p.live is None or not p.doc:
            fail("parameter %s: incomplete entry" % p.name)
    return params


def bounds(p):
    if p.minimum is not None and p.maximum is not None:
        return "%s .. %s" % (p.minimum, p.maximum)
    if p.minimum is not None:
        return "at least %s" % p.minimum
    if p.maximum is not None:
        return "at most %s" % p.maximum
    return None


def conf_value(v):
    """A value as cfg.c reads it back: quoted when it has to be."""
    if v == "" or "#" in v or '"' in v or v != v.strip() or "\\" in v:
        return '"%s"' % v.replace("\\", "\\\\").replace('"', '\\"')
    return v


def gen_conf(params):
    out = [CONF_HEADER.rstrip("\n")]
    for p in params:
        what = [p.type]
        b = bounds(p)
        if b:
            what.append(b)
        what.append("runtime" if p.live else "reload" if p.reload else "restart")
        out.append("")
        out.append("# %s (%s)" % (p.name, ", ".join(what)))
        for ln in textwrap.wrap(p.doc, CONF_WIDTH - 4, break_on_hyphens=False):
            out.append("#   " + ln)
        if p.varnish is not None and p.varnish != p.name:
            out.append("#   Varnish's name for it: %s." % p.varnish)
        out.append("#%s = %s" % (p.name, conf_value(p.default)))
    return "\n".join(out) + "\n"


def roff(s):
    """Escape text for troff: backslashes, and a leading control character."""
    s = s.replace("\\", "\\e").replace("-", "\\-")
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def roff_text(s):
    """Running text: one sentence per line, as groff prefers."""
    s = s.replace("\\", "\\e")
    lines = []
    for sent in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", s):
        if sent.startswith((".", "'")):
            sent = "\\&" + sent
        lines.append(sent)
    return "\n".join(lines)


MAN_HEAD = r""".\" Generated by scripts/gen_params.py from `surogatd -x params`.
.\" Do not edit: change include/surogat/tbl/params.h instead.
.TH SUROGAT\-PARAMS 7 "" "%(source)s" "surogat manual"
.nh
.SH NAME
surogat\-params \- runtime parameters of surogatd
.SH SYNOPSIS
.B surogatd
.RB [ \-c
.IR file ]
.RB [ \-p
.IR name = value ]...
.br
.B surogatctl param.show
.RI [ name ]
.br
.B surogatctl param.set
.I name value
.SH DESCRIPTION
Every tunable of
.BR surogatd (8)
is a parameter in one table, from which this page is generated.
A parameter is set, in this order, from its built\-in default,
from the configuration file given with
.B \-c
(lines of
.IR "name " = " value" ,
see the installed
.I surogat.conf
for every parameter commented out with its default),
and from each
.BI \-p " name" = value
on the command line, the last one winning.
.PP
Parameters marked
.I runtime
can also be changed while the daemon runs, through the admin interface:
.B surogatctl param.set
.IR "name value" ;
they take effect at once, and the change is lost at restart.
A reload
.RB ( SIGHUP ,
.BR "surogatctl reload" )
applies the configuration file's values of the
.I runtime
parameters and of those marked
.IR reload ,
which are read when the certificates or the policy are loaded.
Parameters marked
.I restart
are read at startup only, and
.B param.set
refuses them.
.PP
Varnish's names are taken wherever a name is: a parameter whose
.B Varnish:
line gives another name can be set under that name too
.RB ( "\-p first_byte_timeout=30" ),
with Varnish's value formats; \(lqthe same name\(rq marks a parameter
that is Varnish's under its own name.
See
.BR surogat.conf (5)
for the list and for the
.B feature
parameter.
.B surogatctl param.show
lists the values in use.
.PP
A value out of range or of the wrong form stops
.B surogatd
at startup with a one\-line message naming the parameter
(and, in a configuration file, the file and line);
.B param.set
refuses it and keeps the old value.
.SS Types
.TP 9
.B count
An unsigned integer.
.TP
.B bytes
A size: a number with an optional suffix
.BR k ", " m ", " g " or " t
(powers of 1024; a trailing
.B b
or
.B ib
is allowed, e.g.\&
.BR 64k ", " 1.5MiB ).
.TP
.B seconds
A duration: a number of seconds, or a number followed by one of
.BR us ", " ms ", " s ", " m ", " h ", " d ", " w " or " y
(a year is 365 days), e.g.\&
.BR 250ms ", " 3.5s ", " 2m .
.TP
.B bool
.BR on / off ,
also
.BR true / false ,
.BR yes / no ,
.BR enable / disable ,
.BR 1 / 0 .
.TP
.B feature
Varnish's feature flags:
.BI + name
and
.BI \- name
separated by commas (see
.BR surogat.conf (5)).
.TP
.B string
Text.
In the configuration file, put it in double quotes when it is empty
or contains
.BR # .
.SH PARAMETERS
"""

MAN_TAIL = r""".SH SEE ALSO
.BR surogatd (8),
.BR surogatctl (1),
.BR surogat.conf (5)
"""


def gen_man(params, version):
    source = ("surogat " + version) if version else "surogat"
    out = [MAN_HEAD % {"source": source}]
    for p in params:
        out.append(".SS %s" % roff(p.name))
        out.append(".PD 0")
        out.append(".TP 10")
        out.append("Type:")
        out.append(roff(p.type))
        out.append(".TP")
        out.append("Default:")
        # A long list (a cipher list) may break after its separators (\:),
        # ragged (.ad l), which troff would otherwise warn about.
        out.append(".ad l")
        out.append(re.sub(r"([:,])", r"\1\\:", roff(p.default)) if p.default != ""
                   else "(empty)")
        out.append(".ad")
        if p.minimum is not None:
            out.append(".TP")
            out.append("Minimum:")
            out.append(roff(p.minimum))
        if p.maximum is not None:
            out.append(".TP")
            out.append("Maximum:")
            out.append(roff(p.maximum))
        out.append(".TP")
        out.append("Changes:")
        out.append("runtime (param.set, reload)" if p.live
                   else "reload (SIGHUP, not param.set)" if p.reload
                   else "restart (startup only)")
        if p.varnish is not None:
            out.append(".TP")
            out.append("Varnish:")
            out.append("the same name" if p.varnish == p.name
                       else "%s (an alias)" % roff(p.varnish))
        out.append(".PD")
        out.append(".PP")
        out.append(roff_text(p.doc))
    out.append(MAN_TAIL)
    return "\n".join(out)


def run_binary(path):
    try:
        text = subprocess.run([path, "-x", "params"], check=True, capture_output=True,
                              text=True, timeout=30).stdout
        ver = subprocess.run([path, "-V"], check=True, capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        fail("%s: %s" % (path, e))
    m = re.search(r"surogat-([0-9][^)\s]*)", ver)
    return text, (m.group(1) if m else None)


def write(path, data):
    if path == "-":
        sys.stdout.write(data)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description="Generate surogat-params(7) and surogat.conf "
                                 "from `surogatd -x params`.")
    ap.add_argument("surogatd", nargs="?",
                    help="the surogatd binary to run (default: read -x params from stdin)")
    ap.add_argument("--man", metavar="FILE", help="write the man page (- for stdout)")
    ap.add_argument("--conf", metavar="FILE", help="write the configuration file (- for stdout)")
    ap.add_argument("--check-conf", metavar="FILE",
                    help="exit 1 with a diff when FILE differs from the generated file")
    ap.add_argument("--version", help="version shown in the man page (default: from -V)")
    args = ap.parse_args()
    if not (args.man or args.conf or args.check_conf):
        ap.error("give at least one of --man, --conf, --check-conf")

    if args.surogatd:
        text, version = run_binary(args.surogatd)
    else:
        text, version = sys.stdin.read(), None
    if args.version:
        version = args.version
    params = parse(text)
    conf = gen_conf(params)

    if args.man:
        write(args.man, gen_man(params, version))
    if args.conf:
        write(args.conf, conf)
    if args.check_conf:
        try:
            with open(args.check_conf, encoding="utf-8") as f:
                have = f.read()
        except OSError as e:
            fail("%s: %s" % (args.check_conf, e.strerror))
        if have != conf:
            sys.stdout.writelines(difflib.unified_diff(
                have.splitlines(True), conf.splitlines(True),
                args.check_conf, "generated from surogatd -x params"))
            sys.stdout.write(
                "\n%s is out of date with include/surogat/tbl/params.h; regenerate it:\n"
                "    scripts/gen_params.py --conf %s <builddir>/surogatd\n"
                % (args.check_conf, args.check_conf))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
