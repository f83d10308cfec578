/**
 * The processes under test, each its own process on loopback: the upstream simulator, Redis (when
 * `redis-server` is on PATH; the embedded store otherwise), the bare proxy and the gateway, plus one
 * test key and one funded live key; optionally a second gateway with `server.workers: 2` on the same
 * Redis. Each gateway runs `src/main.ts` exactly as in production, from a config file written here.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { answers, freePort, start, type Proc } from './procs.ts';
import { withChildren } from './proc-stats.ts';
import { scriptCommands } from './redis-stats.ts';

export const MODEL = 'bench-model';
/** The gateway's node flags in production (Dockerfile NODE_OPTIONS, `npm start`); later flags override. */
export const PRODUCTION_NODE_ARGS = ['--max-old-space-size=256'];
/** `server.workers` of the workers target's gateway. */
export const WORKERS = 2;

/** Where each target is reached and how it authenticates. */
export interface Target {
  readonly name: 'direct' | 'bare' | 'bare+redis' | 'tollgate/test' | 'tollgate/live' | `tollgate/live-w${number}` | 'tollgate/live-budget';
  /** Base URL including `/v1`. */
  readonly base: string;
  readonly authorization: string;
  /** The process whose CPU and RSS are reported (the proxy hop; the simulator for direct). */
  readonly pid: number;
  /** node:cluster workers under `pid` (tollgate/live-w2): CPU, RSS and syscalls are summed over pid and them. */
  readonly workers?: number;
  /** redis-server, when this target uses it (bare+redis, tollgate/* on the Redis store): its CPU is reported too. */
  readonly redisPid?: number;
  /** tollgate/* on the Redis store: where `INFO commandstats` is read (Redis time per request, bench/redis-stats.ts). */
  readonly redisUrl?: string;
}

export interface Stack {
  readonly targets: Target[];
  readonly store: 'redis' | 'embedded';
  readonly procs: Proc[];
  readonly dir: string;
  readonly gateway: Proc;
  /** Every process of the stack, the workers found at start included (the load child and the runner are added per run). */
  readonly pids: number[];
  /** Commands the gateway runs only inside Lua scripts (of the src/ it runs): left out of the commandstats total. */
  readonly redisScriptCommands: ReadonlySet<string>;
  stop(): Promise<void>;
}

export interface StackOptions {
  /** Extra node flags for the gateway (e.g. `--cpu-prof`). */
  gatewayNodeArgs?: string[];
  /** Force the embedded store even when redis-server exists. */
  embedded?: boolean;
  /**
   * Run the gateway from this git ref's src/ (exported with `git archive` into a temp dir, sharing
   * node_modules) instead of the working tree: compare commits, or measure HEAD while others edit.
   */
  ref?: string;
  /**
   * Add the "bare+redis" target: the bare proxy plus two autopipelined Redis round trips (issue 6's
   * reference point), on the same redis-server as the gateway. Needs redis-server.
   */
  reference?: boolean;
  /**
   * Add the "tollgate/live-w2" target: a second gateway with `server.workers: 2` on the same Redis,
   * loaded with the same live key. Left out on the embedded store, which refuses workers > 1. A number
   * sets the workers (target "tollgate/live-w<n>"; bench/hot-account.ts runs 4).
   */
  workers?: boolean | number;
  /**
   * Add the "tollgate/live-budget" target: a live key of the same account with a budget it never reaches
   * (docs/keys.md), on the same gateway: what a budget costs the hot path (bench/ab.ts --key live-budget).
   */
  budgetKey?: boolean;
  /** Config sections merged over the generated ones (e.g. `{ credit: { leases: true } }`; a ref must know them). */
  config?: Record<string, object>;
}

/** Exports src/ and package.json of a git ref into dir; returns the gateway's working directory. */
function exportRef(ref: string, dir: string): string {
  const root = join(dir, 'ref');
  mkdirSync(root);
  execFileSync('sh', ['-c', 'git archive --format=tar "$1" src package.json | tar -x -C "$2"', 'sh', ref, root], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  symlinkSync(join(process.cwd(), 'node_modules'), join(root, 'node_modules'));
  return root;
}

export function hasRedis(): boolean {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Starts everything and creates the keys; `stop()` ends the processes in reverse order. */
export async function startStack(o: StackOptions = {}): Promise<Stack> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
  const procs: Proc[] = [];
  // The temp dir (config, gateway stderr, exported ref) goes with the stack: a run leaves nothing behind.
  const stop = async () => {
    for (const p of procs.reverse()) await p.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const sim = await start('simulator', process.execPath, ['src/simulator/cli.ts', '--port', '0'], {
      ready: (l) => l.some((x) => x.startsWith('http')),
    });
    procs.push(sim);
    const simUrl = firstLine(sim);

    const useRedis = !o.embedded && hasRedis();
    let redisUrl: string | undefined;
    let redisPid: number | undefined;
    if (useRedis) {
      const port = await freePort();
      const redis = await start(
        'redis',
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        {
          ready: (l) => l.some((x) => x.includes('Ready to accept connections')),
        },
      );
      procs.push(redis);
      redisPid = redis.pid;
      redisUrl = `redis://127.0.0.1:${port}`;
    }

    const bare = await start('bare-proxy', process.execPath, ['bench/bare-proxy.ts', '--port', '0', '--upstream', new URL(simUrl).origin], {
      ready: (l) => l.some((x) => x.startsWith('http')),
    });
    procs.push(bare);
    const bareUrl = firstLine(bare);
    let bareRedis: Proc | undefined;
    if (o.reference) {
      if (!redisUrl) throw new Error('--reference needs redis-server on PATH (and no --embedded)');
      bareRedis = await start(
        'bare-redis-proxy',
        process.execPath,
        ['bench/bare-proxy.ts', '--port', '0', '--upstream', new URL(simUrl).origin, '--redis', redisUrl],
        { ready: (l) => l.some((x) => x.startsWith('http')) },
      );
      procs.push(bareRedis);
    }

    const adminToken = randomBytes(24).toString('base64url'); // 32 characters, the admin token's minimum
    const env: NodeJS.ProcessEnv = { ...process.env, TOLLGATE_ADMIN_TOKEN: adminToken, NODE_ENV: 'production' };
    delete env.TOLLGATE_WORKERS; // it would override server.workers in both gateways
    if (redisUrl) env.REDIS_URL = redisUrl;
    else delete env.NODE_ENV; // production refuses the embedded store
    const cwd = o.ref ? exportRef(o.ref, dir) : undefined;
    /** Writes a config and starts `src/main.ts` on it; ready once its admin /readyz answers (every worker up). */
    const startGateway = async (name: string, workers: number) => {
      const [port, adminPort] = [await freePort(), await freePort()];
      const configFile = join(dir, `${name}.yaml`);
      const config: Record<string, unknown> = gatewayConfig(simUrl, port, adminPort, workers, accountLimits(cwd ?? process.cwd()));
      for (const [section, v] of Object.entries(o.config ?? {})) config[section] = { ...(config[section] as object | undefined), ...v };
      writeFileSync(configFile, JSON.stringify(config, null, 2)); // JSON is YAML
      const adminUrl = `http://127.0.0.1:${adminPort}`;
      const proc = await start(name, process.execPath, [...PRODUCTION_NODE_ARGS, ...(o.gatewayNodeArgs ?? []), 'src/main.ts'], {
        env: { ...env, TOLLGATE_CONFIG: configFile },
        ...(cwd && { cwd }),
        logFile: join(dir, `${name}.stderr.log`),
        ready: () => answers(`${adminUrl}/readyz`),
        timeoutMs: 20_000,
      });
      procs.push(proc);
      return { proc, base: `http://127.0.0.1:${port}/v1`, adminUrl };
    };
    const gw1 = await startGateway('gateway', 1);
    const gateway = gw1.proc;
    const adminUrl = gw1.adminUrl;

    const admin = async (path: string, body: unknown) => {
      const res = await fetch(`${adminUrl}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const json = (await res.json()) as Record<string, unknown>;
      if (!res.ok) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`);
      return json;
    };
    // The limiter must run (its cost is what the test key measures) but never refuse.
    const testKey = await admin('/admin/keys', {
      account: 'bench',
      env: 'test',
      name: 'bench test key',
      rate_limits: { requests_per_minute: 1_000_000_000, tokens_per_minute: 1_000_000_000_000 },
    });
    const liveKey = await admin('/admin/keys', { account: 'bench', env: 'live', name: 'bench live key' });
    await admin('/admin/accounts/bench/credits', { amount_micros: 1e15, idempotency_key: 'bench-grant' });
    const budgetKey = o.budgetKey
      ? await admin('/admin/keys', {
          account: 'bench',
          env: 'live',
          name: 'bench budget key',
          budget: { limit_micros: 1e15, period: 'month' },
        })
      : undefined;

    // Same Redis, so the same keys and account: the live key is read from Redis like any key.
    let gw2: Awaited<ReturnType<typeof startGateway>> | undefined;
    const workers = typeof o.workers === 'number' ? o.workers : WORKERS;
    if (o.workers && redisUrl) {
      try {
        gw2 = await startGateway(`gateway-w${workers}`, workers);
      } catch (e) {
        throw new Error(`${(e as Error).message}\n(a --ref older than server.workers cannot run it: add --no-workers)`);
      }
    }

    const gw = gw1.base;
    const client = 'Bearer sk-bench-not-checked-0123456789abcdef'; // same header size on every target
    return {
      targets: [
        { name: 'direct', base: simUrl, authorization: client, pid: sim.pid },
        { name: 'bare', base: `${bareUrl}/v1`, authorization: client, pid: bare.pid },
        ...(bareRedis
          ? [
              {
                name: 'bare+redis',
                base: `${firstLine(bareRedis)}/v1`,
                authorization: client,
                pid: bareRedis.pid,
                ...(redisPid && { redisPid }),
              } as const,
            ]
          : []),
        {
          name: 'tollgate/test',
          base: gw,
          authorization: `Bearer ${testKey.key as string}`,
          pid: gateway.pid,
          ...(redisPid && { redisPid }),
          ...(redisUrl && { redisUrl }),
        },
        {
          name: 'tollgate/live',
          base: gw,
          authorization: `Bearer ${liveKey.key as string}`,
          pid: gateway.pid,
          ...(redisPid && { redisPid }),
          ...(redisUrl && { redisUrl }),
        },
        ...(budgetKey
          ? [
              {
                name: 'tollgate/live-budget',
                base: gw,
                authorization: `Bearer ${budgetKey.key as string}`,
                pid: gateway.pid,
                ...(redisPid && { redisPid }),
                ...(redisUrl && { redisUrl }),
              } as const,
            ]
          : []),
        ...(gw2
          ? [
              {
                name: `tollgate/live-w${workers}`,
                base: gw2.base,
                authorization: `Bearer ${liveKey.key as string}`,
                pid: gw2.proc.pid,
                workers,
                ...(redisPid && { redisPid }),
                ...(redisUrl && { redisUrl }),
              } as const,
            ]
          : []),
      ],
      store: useRedis ? 'redis' : 'embedded',
      procs,
      dir,
      gateway,
      // Idle workers of one gateway while another target runs are ours too, not foreign CPU.
      pids: procs.flatMap((p) => (p === gw2?.proc ? withChildren(p.pid) : [p.pid])),
      redisScriptCommands: scriptCommands(join(cwd ?? process.cwd(), 'src')),
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Whether the gateway's src/ has the per-account limits (SPEC §13); an older --ref refuses their config keys. */
export function accountLimits(cwd: string): boolean {
  // The rate_limits section lives in src/limits/config.ts since the config was split by section.
  const files = ['src/config/schema.ts', 'src/limits/config.ts'].map((f) => join(cwd, f)).filter((f) => existsSync(f));
  return files.some((f) => readFileSync(f, 'utf8').includes("'test_account'"));
}

/** The generated gateway config (SPEC §11 keys), one upstream: the simulator. */
export function gatewayConfig(
  simUrl: string,
  port: number,
  adminPort: number,
  workers: number,
  perAccount: boolean,
): Record<string, unknown> {
  // The account's limits (SPEC §13) must not refuse the bench key's account either; the per-key ones still run.
  const account = perAccount && {
    rate_limits: { test_account: { requests_per_minute: 1_000_000_000, tokens_per_minute: 1_000_000_000_000 } },
  };
  return {
    ...account,
    server: { host: '127.0.0.1', port, admin_host: '127.0.0.1', admin_port: adminPort, drain_seconds: 2, ...(workers > 1 && { workers }) },
    store: { command_timeout_ms: 500 },
    // One key carries every scenario, 1,000 concurrent slow streams included: the per-key concurrency
    // limit (SPEC §12, default 64) would refuse most of them. (A --ref older than that setting
    // refuses the key: drop it there.)
    limits: { max_concurrent_per_key: 100_000, ...(perAccount && { max_concurrent_per_account: 100_000 }) },
    log_level: 'info',
    models: [
      {
        name: MODEL,
        upstream_model: 'sim/bench-1',
        max_output_tokens: 256,
        price: { input: 0.1, output: 0.4 },
        upstreams: [{ url: simUrl, api_key: 'upstream-secret' }],
      },
    ],
  };
}

function firstLine(p: Proc): string {
  const url = p.lines.find((l) => l.startsWith('http'));
  if (!url) throw new Error(`${p.name}: no URL printed`);
  return url.trim();
}
