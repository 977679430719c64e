# sandboxd's session driver for python3: reads inputs framed as
# "<length>\n<code>" on stdin, runs each in one namespace that lives as
# long as the session, and answers "<length> <status>\n<output>" on the
# stdout it was started with. The input's output (print, tracebacks and
# what its subprocesses write) goes to a file of its own, so nothing can
# break the framing; its stdin is /dev/null.
import os, sys, traceback, tempfile

CAP = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
sys.stdin = open(os.devnull)
scope = {"__name__": "__main__", "__builtins__": __builtins__}


def read_input():
    line = b""
    while not line.endswith(b"\n"):
        b = proto_in.read(1)
        if not b:
            return None
        line += b
    n, code = int(line), b""
    while len(code) < n:
        b = proto_in.read(n - len(code))
        if not b:
            return None
        code += b
    return code.decode("utf-8", "replace")


while True:
    code = read_input()
    if code is None:
        break
    status = 0
    with tempfile.TemporaryFile() as f:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            try:
                compiled = compile(code, "<input>", "eval")
            except SyntaxError:
                exec(compile(code, "<input>", "exec"), scope)
            else:
                value = eval(compiled, scope)
                if value is not None:
                    print(repr(value))
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        f.seek(0)
        data = f.read(CAP)
    proto_out.write(b"%d %d\n" % (len(data), status) + data)
