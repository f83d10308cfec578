#!/usr/bin/env node
// The `tollgate` command (package.json "bin"): hands argv, the environment and stdio to src/cli/main.ts.
// Node >= 24 runs the TypeScript sources directly by stripping types, but it never strips types in files
// under node_modules (ERR_UNSUPPORTED_NODE_MODULES_TYPE_STRIPPING), so this command runs from a checkout
// or the Docker image, not from a package installed into node_modules.
import { requireNode } from '../scripts/node-check.mjs';

// Before any .ts import (a static one would be loaded before this line runs, and fail on an old Node).
// On an old Node, name the same command through npx, which runs it on the Node that npm ci installed.
requireNode(process.versions.node, ['npx tollgate', ...process.argv.slice(2)].join(' '));
const { run } = await import('../src/cli/main.ts');

const io = {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
};
// `tollgate credits ledger acme --all | head` closes the pipe early: that is the reader's choice, not a crash.
process.stdout.on('error', (err) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});
// exitCode rather than exit(): stdout drains first, and `tollgate serve` keeps running on its listeners.
process.exitCode = await run(process.argv.slice(2), { env: process.env, io, fetch: globalThis.fetch });
