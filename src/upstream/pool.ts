/**
 * Upstreams of each model (SPEC §1.2): one undici Pool per origin with keep-alive, least-outstanding
 * balancing, and passive health — an upstream that keeps failing is ejected for a back-off period
 * that doubles while it keeps failing, then tried again.
 */
import { Pool } from 'undici';
import type { ModelConfig } from '../config/schema.ts';

export interface Upstream {
  /** host:port — a bounded metric label, never a credential. */
  readonly label: string;
  readonly pool: Pool;
  /** Path prefix of the OpenAI API on this upstream, e.g. `/v1`. */
  readonly basePath: string;
  readonly authorization: string | undefined;
  outstanding: number;
  failures: number;
  ejections: number;
  ejectedUntil: number;
}

export interface UpstreamOptions {
  connectTimeoutMs: number;
  ejectAfterFailures: number;
  ejectSeconds: number;
  /** Connections per origin; 0 = unlimited (undici's default). Every open stream holds one. */
  maxConnections: number;
}

export interface Upstreams {
  /** The least-loaded healthy upstream of the model not yet tried, or undefined. */
  pick(model: ModelConfig, tried: ReadonlySet<Upstream>, now: number): Upstream | undefined;
  /** All upstreams of the model, in config order. */
  of(model: ModelConfig): readonly Upstream[];
  succeeded(u: Upstream): void;
  failed(u: Upstream, now: number): void;
  close(): Promise<void>;
}

/** Ejection back-off doubles up to 2^5 × eject_seconds. */
const MAX_BACKOFF_DOUBLINGS = 5;

export function createUpstreams(models: readonly ModelConfig[], o: UpstreamOptions): Upstreams {
  const byUrl = new Map<string, Upstream>();
  const byModel = new Map<ModelConfig, Upstream[]>();
  const pools = new Map<string, Pool>();
  for (const m of models) {
    byModel.set(
      m,
      m.upstreams.map((cfg) => {
        const key = `${cfg.url}\n${cfg.apiKey ?? ''}`;
        let u = byUrl.get(key);
        if (!u) {
          const url = new URL(cfg.url);
          let pool = pools.get(url.origin);
          if (!pool) {
            pool = new Pool(url.origin, {
              // A cap queues every stream past it behind the open ones (1,000 slow streams on 256 sockets ran at 0.34×).
              connections: o.maxConnections > 0 ? o.maxConnections : null,
              keepAliveTimeout: 30_000,
              connect: { timeout: o.connectTimeoutMs },
              // h2 only where configured explicitly; upstream model servers speak HTTP/1.1 (NOTES §3).
              allowH2: false,
            });
            pools.set(url.origin, pool);
          }
          u = {
            label: url.host,
            pool,
            basePath: url.pathname.replace(/\/+$/, ''),
            authorization: cfg.apiKey ? `Bearer ${cfg.apiKey}` : undefined,
            outstanding: 0,
            failures: 0,
            ejections: 0,
            ejectedUntil: 0,
          };
          byUrl.set(key, u);
        }
        return u;
      }),
    );
  }
  let rotation = 0;

  return {
    pick(model, tried, now) {
      const list = byModel.get(model) ?? [];
      let best: Upstream | undefined;
      // Start at a rotating offset so ties (all idle) spread instead of always hitting the first.
      const start = rotation++ % Math.max(1, list.length);
      for (let i = 0; i < list.length; i++) {
        const u = list[(start + i) % list.length]!;
        if (tried.has(u) || u.ejectedUntil > now) continue;
        if (!best || u.outstanding < best.outstanding) best = u;
      }
      return best;
    },
    of: (model) => byModel.get(model) ?? [],
    succeeded(u) {
      u.failures = 0;
      u.ejections = 0;
    },
    failed(u, now) {
      if (++u.failures < o.ejectAfterFailures) return;
      u.ejectedUntil = now + o.ejectSeconds * 1000 * 2 ** Math.min(u.ejections, MAX_BACKOFF_DOUBLINGS);
      u.ejections++;
      u.failures = 0;
    },
    async close() {
      await Promise.all([...pools.values()].map((p) => p.close()));
    },
  };
}
