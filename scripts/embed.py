#!/usr/bin/env python3
"""Write a C header defining `static const char NAME[]` with a file's bytes:
embed.py NAME INPUT OUTPUT.  Used to compile vcl/builtin.lua into surogatd."""
import sys

name, src, out = sys.argv[1:4]
data = open(src, "rb").read()
with open(out, "w") as f:
    f.write("/* generated from %s by scripts/embed.py: do not edit */\n" % src.split("/")[-1])
    f.write("static const char %s[] =\n" % name)
    for i in range(0, len(data), 16):
        f.write('    "%s"\n' % "".join("\\x%02x" % b for b in data[i:i + 16]))
    f.write("    ;\n")
