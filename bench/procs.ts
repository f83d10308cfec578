/**
 * Child processes of a benchmark run: free loopback ports, spawning with a readiness check, and a
 * stop that waits for the exit (so a `--cpu-prof` profile is written before we read it). Every child
 * is also killed when the runner exits, so an interrupted run leaves no orphan on the 2 shared cores.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { openSync } from 'node:fs';

/** A running child and how to stop it. */
export interface Proc {
  readonly name: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** Stdout lines printed before it was ready (e.g. its URL). */
  readonly lines: readonly string[];
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/** A port nobody listens on right now (bound to 0, read, closed). */
export async function freePort(): Promise<number> {
  const srv = createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address() as { port: number };
  srv.close();
  await once(srv, 'close');
  return port;
}

export interface StartOptions {
  /** Resolves when the child is ready; receives its stdout lines so far (for a printed URL). */
  ready: (lines: string[]) => Promise<boolean> | boolean;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * Send stdout to /dev/null and stderr to this file (the gateway: pino still formats and writes its
   * line per request, as in production, without filling a disk or a pipe reader's CPU).
   */
  logFile?: string;
  timeoutMs?: number;
}

/** Spawns `cmd args` and waits until `ready` says so; the child's output is kept only until then. */
export async function start(name: string, cmd: string, args: string[], o: StartOptions): Promise<Proc> {
  const stdio: SpawnOptions['stdio'] = o.logFile ? ['ignore', 'ignore', openSync(o.logFile, 'a')] : ['ignore', 'pipe', 'pipe'];
  const child = spawn(cmd, args, { stdio, env: o.env ?? process.env, ...(o.cwd && { cwd: o.cwd }) });
  live.add(child);
  child.once('exit', () => live.delete(child));
  const lines: string[] = [];
  let errText = '';
  child.stdout?.setEncoding('utf8').on('data', (s: string) => {
    if (lines.length < 1000) lines.push(...s.split('\n').filter(Boolean));
  });
  child.stderr?.setEncoding('utf8').on('data', (s: string) => {
    if (errText.length < 8192) errText += s;
  });
  const deadline = Date.now() + (o.timeoutMs ?? 15_000);
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${name} exited early (${child.exitCode ?? child.signalCode}): ${errText || lines.join('\n')}`);
    if (
      await Promise.resolve()
        .then(() => o.ready(lines))
        .catch(() => false)
    )
      break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${name} not ready after ${o.timeoutMs ?? 15_000} ms: ${errText || lines.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  // Keep draining the pipes so a chatty child never blocks on a full pipe.
  child.stdout?.removeAllListeners('data').resume();
  child.stderr?.removeAllListeners('data').resume();
  return {
    name,
    pid: child.pid!,
    child,
    lines,
    async stop(graceMs = 5_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}

/** True once GET url answers with a 2xx (readiness probes). */
export async function answers(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
  await res.arrayBuffer();
  return res.ok;
}

/** Runs a child to completion; resolves with its stdout lines, rejects on a non-zero exit. */
export async function runChild(cmd: string, args: string[], onLine?: (line: string, pid: number) => void): Promise<string[]> {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const pid = child.pid!;
  const lines: string[] = [];
  let buf = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    buf += s;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      lines.push(line);
      onLine?.(line, pid);
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => {
    if (err.length < 8192) err += s;
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  live.delete(child);
  if (code !== 0) throw new Error(`${cmd} ${args.slice(0, 1).join(' ')} exited ${code}: ${err}`);
  return lines;
}

/**
 * redis-server under valgrind's callgrind, as the Redis instruction counts run it (redis-instructions.ts,
 * limiter-script.ts): the 10 Hz serverCron left out (under valgrind a run lasts long enough for it to be a
 * fifth of the count), no persistence, ready when it says so. `config`: more server arguments.
 */
export function startCallgrindRedis(port: number, outFile: string, logFile: string, config: readonly string[] = []): Promise<Proc> {
  return start(
    'redis (callgrind)',
    'valgrind',
    [
      '--tool=callgrind',
      // In this order: --toggle-collect also sets --collect-atstart=no (only serverCron would count).
      '--toggle-collect=serverCron',
      '--collect-atstart=yes',
      `--callgrind-out-file=${outFile}`,
      `--log-file=${logFile}`,
      'redis-server',
      ...['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      ...config,
    ],
    { ready: (l) => l.some((x) => x.includes('Ready to accept connections')), timeoutMs: 300_000 },
  );
}
