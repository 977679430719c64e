# sandboxd's session driver for sql: one psql connection kept for the
# session (SET, temporary tables and transactions last), reached as
# libpq's environment says (PGDATABASE, PGUSER, PGHOST, PGPORT). Run as
# root, it runs psql as the role's own user of the sandbox (PGUSER, else
# postgres), as Debian's peer authentication on the local socket wants.
# It reads inputs framed as "<length>\n<code>" on stdin, hands each to
# psql followed by a line that ends a statement left open and an \echo of
# a token of its own, and answers "<length> <status>\n<output>" with what
# psql printed (results and errors, as psql prints them) until the token;
# status 1 when psql said ERROR. Its first answer, before any input, says
# whether psql connected (status 0) or why not.
import os, pwd, re, secrets, shutil, subprocess, sys

CAP = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 2):
    os.dup2(null, fd)
token = ("__sandboxd_sql_" + secrets.token_hex(16) + "__").encode()
prefix = re.compile(rb"^psql:<stdin>:\d+: ")
failed = re.compile(rb"^(ERROR|FATAL|PANIC|error): ")


def answer(data, status):
    data = data[:CAP]
    proto_out.write(b"%d %d\n" % (len(data), status) + data)


def read_input():
    line = b""
    while not line.endswith(b"\n"):
        b = proto_in.read(1)
        if not b or len(line) > 20:
            return None
        line += b
    n, code = int(line), b""
    while len(code) < n:
        b = proto_in.read(n - len(code))
        if not b:
            return None
        code += b
    return code


psql = shutil.which("psql")
if not psql:
    answer(b"no psql in the sandbox: the sandbox sees the host's /usr; install PostgreSQL's client there (Debian: postgresql-client)", 127)
    sys.exit(0)
env = dict(os.environ)
run_as = None
if os.geteuid() == 0:
    role = env.get("PGUSER") or "postgres"
    try:
        run_as = pwd.getpwnam(role)
    except KeyError:
        pass
    env["PGUSER"] = role
    if run_as:
        env.update(HOME=run_as.pw_dir, USER=run_as.pw_name, LOGNAME=run_as.pw_name)


def become():
    if run_as:
        os.initgroups(run_as.pw_name, run_as.pw_gid)
        os.setgid(run_as.pw_gid)
        os.setuid(run_as.pw_uid)


try:
    p = subprocess.Popen([psql, "-X", "-v", "ON_ERROR_STOP=0", "-f", "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd="/", preexec_fn=become)
except subprocess.SubprocessError as e:
    # become() failed: uid 0 without root's rights (a root caller's
    # session opened without --root) may not change its user.
    answer(("starting psql as user %s: %s; uid 0 without root's rights cannot change its user:"
            " open the session as root of the sandbox (--root)" % (run_as.pw_name if run_as else "?", e)).encode(), 1)
    sys.exit(0)
except OSError as e:
    answer(("starting psql: %s" % e).encode(), 127)
    sys.exit(0)


def send(code):
    try:
        p.stdin.write(code + b"\n;\n\\echo " + token + b"\n")
        p.stdin.flush()
        return True
    except OSError:
        return False


def collect():
    """What psql prints up to the token, at most CAP bytes kept; the
    status, and whether psql is still there."""
    out, status, start = bytearray(), 0, True
    while True:
        line = p.stdout.readline(65536)
        if not line:
            return bytes(out), status or 1, False
        if start and line.rstrip(b"\n") == token:
            return bytes(out), status, True
        if start:
            line = prefix.sub(b"", line)
            if failed.match(line):
                status = 1
        start = line.endswith(b"\n")
        if len(out) < CAP:
            out += line[: CAP - len(out)]


# psql connects before it reads: its first answer says whether it did.
if not send(b""):
    answer(b"psql ended at once", 1)
    sys.exit(0)
out, status, alive = collect()
if not alive or status:
    try:
        who = env.get("PGUSER") or pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        who = str(os.geteuid())
    answer(b"psql could not connect as role " + who.encode() + b": " + out, 1)
    sys.exit(0)
answer(b"", 0)
while True:
    code = read_input()
    if code is None:
        break
    if not send(code):
        answer(b"psql has ended", 1)
        break
    out, status, alive = collect()
    answer(out, status)
    if not alive:
        break
