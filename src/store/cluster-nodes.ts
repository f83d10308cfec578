/**
 * Redis Cluster node addresses (REDIS_CLUSTER_NODES / store.cluster_nodes): `host:port`, or a
 * `redis://[user:password@]host:port` / `rediss://…` (TLS) URL. ioredis takes one set of credentials and
 * one TLS setting for every node of a cluster (`redisOptions`), so the nodes must agree on them; a
 * config where they differ is refused. Errors and `clusterAddress` never contain a password.
 */

export interface ClusterNodes {
  nodes: { host: string; port: number }[];
  username: string | undefined;
  password: string | undefined;
  /** Every node was given as `rediss://`. */
  tls: boolean;
}

/** One node, parsed; the error names the node by its position, never by its text (it may hold a password). */
function parseNode(raw: string, i: number): { host: string; port: number; username: string; password: string; tls: boolean } {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(raw)?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== 'redis' && scheme !== 'rediss')
    throw new Error(`node ${i + 1} must be host:port, redis://… or rediss://… (TLS); got a value starting "${scheme}:"`);
  let u: URL;
  try {
    u = new URL(scheme ? raw : `redis://${raw}`);
  } catch {
    throw new Error(`node ${i + 1} is not a valid host:port or redis:// URL`);
  }
  if (!u.hostname) throw new Error(`node ${i + 1} has no host`);
  return {
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port: Number(u.port || 6379),
    username: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    tls: scheme === 'rediss',
  };
}

/** Parses and checks the node list; throws an Error (no password in its message) on a bad or inconsistent list. */
export function parseClusterNodes(list: readonly string[]): ClusterNodes {
  const parsed = list.map(parseNode);
  const first = parsed[0];
  if (!first) return { nodes: [], username: undefined, password: undefined, tls: false };
  parsed.forEach((n, i) => {
    if (n.tls !== first.tls)
      throw new Error(
        `node ${i + 1} ${n.tls ? 'is' : 'is not'} rediss:// (TLS) and node 1 ${first.tls ? 'is' : 'is not'}: every node must use the same scheme`,
      );
    if (n.username !== first.username || n.password !== first.password)
      throw new Error(`node ${i + 1} has other credentials than node 1: every node must carry the same user and password (or none)`);
  });
  return {
    nodes: parsed.map(({ host, port }) => ({ host, port })),
    username: first.username || undefined,
    password: first.password || undefined,
    tls: first.tls,
  };
}

/** The nodes for log lines and reports: `host:port,…` (`rediss://host:port` with TLS), never credentials. */
export function clusterAddress(list: readonly string[]): string {
  return list
    .map((raw, i) => {
      try {
        const n = parseNode(raw, i);
        const hp = `${n.host.includes(':') ? `[${n.host}]` : n.host}:${n.port}`;
        return n.tls ? `rediss://${hp}` : hp;
      } catch {
        return '?';
      }
    })
    .join(',');
}
