"""A systemd unit file as the tests need it: its entries, and the command
line its ExecStart= becomes once systemd has expanded the variables."""

import re
import shlex


def unit_entries(text):
    """[(key, value)] of a unit file, continuation lines joined."""
    out = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            k, _, v = line.partition("=")
            out.append((k, v))
    return out


def environment_file(text):
    """{VAR: value} of an EnvironmentFile= (comments and blank lines skipped,
    one level of quotes removed), as systemd reads it."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        k, _, v = line.partition("=")
        words = shlex.split(v) if v else [""]
        env[k.strip()] = " ".join(words)
    return env


def unit_environment(entries, envfile_text=None):
    """The environment a service gets from Environment= lines, then the
    EnvironmentFile= whose text is given (it wins, as in systemd)."""
    env = {}
    for k, v in entries:
        if k == "Environment":
            for word in shlex.split(v):
                name, _, val = word.partition("=")
                env[name] = val
    if envfile_text is not None:
        env.update(environment_file(envfile_text))
    return env


def exec_argv(command, env):
    """ExecStart= as systemd runs it: ${VAR} is one word, $VAR splits on blanks."""
    argv = []
    for w in command.split():
        m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", w)
        if m and m.group(1):
            argv.append(env[m.group(1)])
        elif m:
            argv += env[m.group(2)].split()
        else:
            argv.append(w)
    return argv
