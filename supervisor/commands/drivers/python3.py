# sandboxd's session driver for python3: reads inputs framed as
# "<length>\n<code>" on stdin, runs each in one namespace that lives as
# long as the session, and answers "<length> <status>\n<output>" on the
# stdout it was started with. The input's output (print, tracebacks and
# what its subprocesses write) goes to a file of its own, so nothing can
# break the framing; its stdin is /dev/null.
#
# matplotlib draws with Agg (there is no display). The control input
# "\x01sandboxd-figures DIR" (\x01 starts no Python source; the MCP
# server's repl sends it after each input) writes the figures the last
# input drew (plt.show(), or left open) to DIR as PNGs (DIR emptied
# first; at most MAX_FIGURES) and names them; from then on plt.show()
# keeps the open figures for it and closes them.
import io, os, sys, traceback, tempfile, warnings

CAP = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
sys.stdin = open(os.devnull)
scope = {"__name__": "__main__", "__builtins__": __builtins__}
os.environ.setdefault("MPLBACKEND", "Agg")
warnings.filterwarnings("ignore", message=".*non-interactive.*")
FIGURES_INPUT = "\x01sandboxd-figures "
MAX_FIGURES = 8
collecting = False
pending = []  # PNGs kept for the control input


def keep_figures():
    """Keeps the open figures as PNGs (at most MAX_FIGURES) and closes them."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        if len(pending) < MAX_FIGURES:
            buf = io.BytesIO()
            plt.figure(num).savefig(buf, format="png", dpi=100)
            pending.append(buf.getvalue())
        plt.close(num)


def patch_show():
    plt = sys.modules.get("matplotlib.pyplot")
    if not collecting or plt is None or getattr(plt.show, "_sandboxd", False):
        return

    def show(*args, **kwargs):
        keep_figures()

    show._sandboxd = True
    plt.show = show


def write_figures(directory):
    """Writes the figures kept and open to directory and prints their names."""
    global collecting
    collecting = True
    keep_figures()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for name in os.listdir(directory):
        if name.startswith("figure-") and name.endswith(".png"):
            os.unlink(os.path.join(directory, name))
    for i, data in enumerate(pending):
        with open(os.path.join(directory, "figure-%d.png" % i), "wb") as f:
            f.write(data)
        print("figure-%d.png" % i)
    pending.clear()
    patch_show()


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
            if code.startswith(FIGURES_INPUT):
                write_figures(code[len(FIGURES_INPUT):])
                raise SystemExit(0)
            pending.clear()
            patch_show()
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
