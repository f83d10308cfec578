// Runs `node bin/tollgate.js …` as a child process, the way an operator does, and captures what it
// printed and its exit code. The child gets only the environment given here (plus PATH), so a token in
// the developer's own shell can never leak into a test.
// startDemo runs `npm run demo` the same way, for the tests of what the demo prints.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../helpers/wait.ts';

export const BIN = fileURLToPath(new URL('../../bin/tollgate.js', import.meta.url));
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with `args` and `env`; resolves when it exits. */
export function runCli(args: string[], env: Record<string, string>, opts: { cwd?: string } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, cwd: opts.cwd ?? ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c));
    child.stderr.on('data', (c: Buffer) => (stderr += c));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Starts `npm run demo` (scripts/demo.ts, free ports) and resolves with what it printed up to its banner
 * (the links and commands it prints for a person). SIGTERMed at teardown.
 */
export async function startDemo(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const child = spawn(process.execPath, ['scripts/demo.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', PORT: '0', ADMIN_PORT: '0', LOG_LEVEL: 'error' },
  });
  t.teardown(async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c));
  child.stderr.on('data', (c: Buffer) => (out += c));
  await waitFor(() => out.includes('Ctrl-C to stop'), 30_000, 'the demo banner');
  return out;
}

/** Parses `key: value` lines (the CLI's non-JSON output for one record) into an object. */
export function parseFields(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+):\s+(.*)$/.exec(line);
    if (m) out[m[1]!] = m[2]!;
  }
  return out;
}
