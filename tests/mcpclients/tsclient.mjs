// A client of `sandboxctl mcp` on the MCP TypeScript SDK
// (@modelcontextprotocol/sdk 1.x), as a Node agent's host would write it:
// it lists the tools, makes a sandbox, runs a command in it, runs a 3 s
// shell line reading the progress notifications that tell its output
// while it runs (the inspector's CLI shows none: it makes its client with
// progress off), and destroys the sandbox, with the arguments the SDK
// sends, and prints one JSON object of what
// came back for the Go test to check. The SDK itself checks each result's
// structured content against the tool's output schema.
//
//   node tsclient.mjs INSTALL_DIR PROJECT -- SERVER [ARG...]
//
// INSTALL_DIR is where tests/mcpclients/install.sh put the SDK: the
// script may live anywhere, so the SDK is resolved from there.
import { createRequire } from "node:module";
import { join } from "node:path";

const [installDir, project, dashes, ...server] = process.argv.slice(2);
if (!installDir || !project || dashes !== "--" || server.length === 0) {
  console.error("usage: node tsclient.mjs INSTALL_DIR PROJECT -- SERVER [ARG...]");
  process.exit(2);
}
const require = createRequire(join(installDir, "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

const out = {};
// What a call gave back: the structured content, the text, and whether it
// was a tool error.
const call = async (client, name, args, options) => {
  const res = await client.callTool({ name, arguments: args }, undefined, options);
  return {
    is_error: res.isError === true,
    structured: res.structuredContent ?? null,
    text: (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join(""),
  };
};

const transport = new StdioClientTransport({ command: server[0], args: server.slice(1), stderr: "inherit" });
// The stdio transport has no use for the negotiated revision; keep it to
// report which one the two ends agreed on.
transport.setProtocolVersion = (v) => { out.protocol_version = v; };
const client = new Client({ name: "sandboxd-tests-ts-sdk", version: "1.0.0" });
let code = 0;
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  const { tools } = await client.listTools();
  out.tools = tools.map((t) => t.name);
  const exec = tools.find((t) => t.name === "exec");
  out.exec_command_type = exec?.inputSchema?.properties?.command?.type ?? null;
  out.created = await call(client, "sandbox_create", { project });
  const id = out.created.structured?.id;
  if (id) {
    try {
      out.exec = await call(client, "exec", { sandbox: id, command: ["sh", "-c", "echo hi from the TypeScript SDK"] });
      // onprogress makes the SDK send a progressToken; each notification
      // is kept in the order it came, and how many came before the
      // result is counted once the call answered.
      const notes = [];
      const result = await call(client, "exec", { sandbox: id, shell: "sleep 1; echo a; sleep 1; echo b; sleep 1" },
        { onprogress: (p) => notes.push({ progress: p.progress, total: p.total ?? null, message: p.message ?? "" }) });
      out.progress = { before_result: notes.length, notes, result };
    } finally {
      out.destroyed = await call(client, "sandbox_destroy", { sandbox: id });
    }
  }
} catch (err) {
  out.error = String(err?.stack ?? err);
  code = 1;
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(out));
process.exit(code);
