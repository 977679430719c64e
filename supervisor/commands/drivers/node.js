// sandboxd's session driver for node: reads inputs framed as
// "<length>\n<code>" on fd 3, runs each in one context that lives as long
// as the session (top-level let, const and var stay, as in node's REPL),
// awaits a result that is a promise, and answers "<length> <status>\n"
// and the output on fd 4. Its stdout and stderr (console, process.stdout
// and what its subprocesses write) are a file opened for appending, read
// through fd 5 and emptied before each input, so nothing can break the
// framing. sessions.go starts it from sh, which sets those fds up.
"use strict";
const fs = require("fs");
const vm = require("vm");
const util = require("util");

const CAP = Number(process.argv[1] || 1 << 20);
// An input's process.exit ends that input, not the session.
class Exit extends Error {}
const proc = Object.create(process, {
  exit: { value: (code) => { throw new Exit(String(code === undefined ? 0 : code)); } },
});
const ctx = vm.createContext(Object.assign(Object.create(null), {
  require, console, process: proc, Buffer, setTimeout, clearTimeout,
  setInterval, clearInterval, setImmediate, clearImmediate, URL,
  TextEncoder, TextDecoder, fetch: globalThis.fetch,
}));

// Inputs are read without blocking the event loop, so that timers and
// servers an input started run between inputs.
const inputs = [];
let waiting = null;
let pending = Buffer.alloc(0);
const stream = fs.createReadStream(null, { fd: 3 });
stream.on("data", (b) => {
  pending = Buffer.concat([pending, b]);
  for (;;) {
    const nl = pending.indexOf(10);
    if (nl < 0) {
      if (pending.length > 20) stream.destroy(new Error("bad frame header"));
      return;
    }
    const n = Number(pending.subarray(0, nl).toString());
    if (!Number.isSafeInteger(n) || n < 0) return stream.destroy(new Error("bad frame header"));
    if (pending.length < nl + 1 + n) return;
    inputs.push(pending.subarray(nl + 1, nl + 1 + n).toString("utf8"));
    pending = pending.subarray(nl + 1 + n);
    if (waiting) waiting();
  }
});
const ended = new Promise((resolve) => { stream.on("end", resolve); stream.on("error", resolve); });
stream.on("end", () => waiting && waiting());
stream.on("error", () => waiting && waiting());

async function readInput() {
  while (inputs.length === 0) {
    if (stream.destroyed || stream.readableEnded) return null;
    await Promise.race([new Promise((r) => { waiting = r; }), ended]);
    waiting = null;
  }
  return inputs.shift();
}

// stack keeps an error's frames down to the input's own.
function stack(e) {
  if (!e || !e.stack) return String(e);
  const lines = String(e.stack).split("\n");
  const cut = lines.findIndex((l) => /at (Script\.runInContext|new Script) /.test(l));
  return (cut > 0 ? lines.slice(0, cut) : lines).join("\n");
}

function output() {
  const b = Buffer.alloc(CAP);
  let n = 0;
  for (;;) {
    const got = fs.readSync(5, b, n, CAP - n, n);
    if (got === 0 || (n += got) >= CAP) break;
  }
  return b.subarray(0, n);
}

function answer(status) {
  const data = output();
  const head = Buffer.from(`${data.length} ${status}\n`);
  for (const part of [head, data]) {
    for (let off = 0; off < part.length; ) off += fs.writeSync(4, part, off);
  }
  fs.ftruncateSync(1, 0);
}

async function main() {
  fs.ftruncateSync(1, 0);
  for (;;) {
    const code = await readInput();
    if (code === null) return;
    let status = 0;
    try {
      let value = vm.runInContext(code, ctx, { filename: "<input>" });
      if (value && typeof value.then === "function") value = await value;
      if (value !== undefined) console.log(util.inspect(value));
    } catch (e) {
      if (e instanceof Exit) {
        status = Number(e.message) | 0;
      } else {
        console.error(stack(e));
        status = 1;
      }
    }
    answer(status);
  }
}

// What a timer or a promise of an earlier input throws is told in the
// next answer; it does not end the session.
process.on("uncaughtException", (e) => console.error(stack(e)));
process.on("unhandledRejection", (e) => console.error(stack(e)));
main().then(() => process.exit(0), (e) => {
  try { fs.writeSync(2, String(e && e.stack || e) + "\n"); } catch (_) {}
  process.exit(1);
});
