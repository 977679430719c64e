# sandboxd's session driver for python3: reads inputs framed as
# "<length>\n<code>" on stdin, runs each in one namespace that lives as
# long as the session, and answers "<length> <status>\n<output>" on the
# stdout it was started with. The input's output (print, tracebacks and
# what its subprocesses write) goes to a file of its own, so nothing can
# break the framing; its stdin is /dev/null.
#
# matplotlib draws with Agg (there is no display). With $SANDBOXD_FIGURES
# set (the MCP server's repl), plt.show() and the figures an input leaves
# open are saved there as PNGs (at most MAX_FIGURES an input, the
# directory emptied before each input) and closed, for the caller to read.
import os, sys, traceback, tempfile, warnings

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
FIGURES = os.environ.get("SANDBOXD_FIGURES", "")
MAX_FIGURES = 8
figures_saved = 0


def start_figures():
    """Empties the figures' directory and makes plt.show() save."""
    global figures_saved
    figures_saved = 0
    if not FIGURES:
        return
    os.makedirs(FIGURES, mode=0o700, exist_ok=True)
    for name in os.listdir(FIGURES):
        if name.endswith(".png"):
            os.unlink(os.path.join(FIGURES, name))
    patch_show()


def patch_show():
    plt = sys.modules.get("matplotlib.pyplot")
    if not FIGURES or plt is None or getattr(plt.show, "_sandboxd", False):
        return

    def show(*args, **kwargs):
        save_figures()

    show._sandboxd = True
    plt.show = show


def save_figures():
    """Saves the open figures as PNGs and closes them."""
    global figures_saved
    plt = sys.modules.get("matplotlib.pyplot")
    if not FIGURES or plt is None:
        return
    for num in plt.get_fignums():
        if figures_saved < MAX_FIGURES:
            path = os.path.join(FIGURES, "figure-%d.png" % figures_saved)
            plt.figure(num).savefig(path, format="png", dpi=100)
            figures_saved += 1
        plt.close(num)


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
            start_figures()
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
        try:
            patch_show()
            save_figures()
        except Exception:
            traceback.print_exc()
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
