/**
 * A route table (SPEC §2a: routing comes first). Patterns are literal segments and `{param}` segments;
 * unknown paths → 404 `not_found`, known paths with another method → 405 `method_not_allowed` with
 * `Allow`, whatever the credentials.
 */
import { GatewayError } from './errors.ts';
import type { Handler } from './context.ts';
import type { RouteDoc } from './openapi.ts';
import type { Scope } from '../store/types.ts';

export interface Route {
  method: string;
  pattern: string;
  handler: Handler;
  /** The route's OpenAPI description (openapi.ts); every gateway route has one (a test checks). */
  doc?: RouteDoc;
  /**
   * Key-authenticated with this scope: the edge's gate authenticates, checks the scope, and admits (gate.ts).
   * `any`: any valid key, no scope (GET /v1/key).
   */
  auth?: Scope | 'any';
  /** With `auth`: the handler admits itself with its token estimate (`ctx.admit`) once it has read the body. */
  meteredAdmit?: true;
  /** Admin-token authenticated: the edge's gate checks the token before the handler runs. */
  admin?: true;
}

interface Compiled {
  pattern: string;
  segments: string[];
  methods: Map<string, Route>;
}

export interface Match {
  handler: Handler;
  route: Route;
  pattern: string;
  params: Record<string, string>;
}

export interface Router {
  /** The handler for method + path; throws 404/405 GatewayErrors. `path` excludes the query string. */
  match(method: string, path: string): Match;
}

/**
 * Compiles the table once; matching a path without parameters is one Map lookup (the table's first
 * pattern to match it, found when compiling), any other path a split and a segment compare, no regex.
 */
export function createRouter(routes: readonly Route[]): Router {
  const compiled: Compiled[] = [];
  for (const r of routes) {
    let c = compiled.find((x) => x.pattern === r.pattern);
    if (!c) compiled.push((c = { pattern: r.pattern, segments: r.pattern.split('/'), methods: new Map() }));
    c.methods.set(r.method, r);
  }
  /** The first pattern in table order that `parts` matches, with its parameters. */
  function find(parts: string[]): { c: Compiled; params: Record<string, string> | undefined } | undefined {
    for (const c of compiled) {
      if (c.segments.length !== parts.length) continue;
      let params: Record<string, string> | undefined;
      let ok = true;
      for (let i = 0; i < parts.length; i++) {
        const seg = c.segments[i]!;
        if (seg.charCodeAt(0) === 123 /* { */) {
          (params ??= {})[seg.slice(1, -1)] = parts[i]!;
        } else if (seg !== parts[i]) {
          ok = false;
          break;
        }
      }
      if (ok) return { c, params };
    }
    return undefined;
  }
  // Every literal pattern's path, resolved as a request for it would be (an earlier {param} pattern wins).
  const exact = new Map<string, { c: Compiled; params: undefined }>();
  for (const c of compiled) {
    if (c.segments.some((s) => s.charCodeAt(0) === 123)) continue;
    const hit = find(c.segments);
    if (hit && !hit.params) exact.set(c.pattern, { c: hit.c, params: undefined });
  }
  return {
    match(method, path) {
      const hit = exact.get(path) ?? find(path.split('/'));
      if (hit) {
        const { c, params } = hit;
        const route = c.methods.get(method) ?? (method === 'HEAD' ? c.methods.get('GET') : undefined);
        if (!route) {
          const allow = [...c.methods.keys()].join(', ');
          throw new GatewayError('method_not_allowed', `Method ${method} is not allowed on ${c.pattern}.`, { headers: { allow } });
        }
        return { handler: route.handler, route, pattern: c.pattern, params: params ?? {} };
      }
      throw new GatewayError('not_found', `No route for ${method} ${path}.`);
    },
  };
}
