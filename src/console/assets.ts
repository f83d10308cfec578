/**
 * The console's static files: its stylesheet and script (static/) and htmx's minified build, served
 * from node_modules as published (no build step). Read once when the console is created (boot, not a
 * request), each under a content-hashed URL so it can be cached for a year: a new release changes the
 * URL, never the bytes behind one. htmx is also served precompressed (the package ships a .gz).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { GatewayError } from '../http/errors.ts';
import type { RequestContext } from '../http/context.ts';

interface Asset {
  body: Buffer;
  gzip: Buffer | undefined;
  type: string;
}

export interface Assets {
  /** The URL of a named asset (`console.css`, `console.js`, `htmx.js`, `favicon.ico`). */
  url(name: 'console.css' | 'console.js' | 'htmx.js' | 'favicon.ico'): string;
  /** Answers GET /console/assets/{file}; 404 for anything not served. */
  serve(ctx: RequestContext): Promise<void>;
  /** Answers GET /favicon.ico (what a browser asks for when a page names no icon): the same icon, cached a day. */
  favicon(ctx: RequestContext): Promise<void>;
}

const IMMUTABLE = 'public, max-age=31536000, immutable';

function htmxDist(): string {
  // htmx.org has no exports map: its package.json locates the dist folder.
  const pkg = createRequire(import.meta.url).resolve('htmx.org/package.json');
  return join(dirname(pkg), 'dist', 'htmx.min.js');
}

/** Loads the assets; throws at boot when a file is missing. */
export function loadAssets(): Assets {
  const here = new URL('./static/', import.meta.url);
  const sources: [string, string, string][] = [
    ['console.css', new URL('console.css', here).pathname, 'text/css; charset=utf-8'],
    ['console.js', new URL('console.js', here).pathname, 'text/javascript; charset=utf-8'],
    ['htmx.js', htmxDist(), 'text/javascript; charset=utf-8'],
    ['favicon.ico', new URL('favicon.ico', here).pathname, 'image/x-icon'],
  ];
  const byFile = new Map<string, Asset>();
  const urls = new Map<string, string>();
  for (const [name, path, type] of sources) {
    const body = readFileSync(path);
    const gz = `${path}.gz`;
    const hash = createHash('sha256').update(body).digest('hex').slice(0, 12);
    const dot = name.lastIndexOf('.');
    const file = `${name.slice(0, dot)}.${hash}${name.slice(dot)}`;
    byFile.set(file, { body, type, gzip: existsSync(gz) ? readFileSync(gz) : undefined });
    urls.set(name, `/console/assets/${file}`);
  }
  const send = (ctx: RequestContext, a: Asset, cache: string) => {
    const gzip = a.gzip !== undefined && /\bgzip\b/.test(String(ctx.req.headers['accept-encoding'] ?? ''));
    const body = gzip ? a.gzip! : a.body;
    ctx.res.writeHead(200, {
      'content-type': a.type,
      'content-length': body.length,
      'cache-control': cache,
      vary: 'accept-encoding',
      ...(gzip && { 'content-encoding': 'gzip' }),
    });
    ctx.res.end(ctx.req.method === 'HEAD' ? undefined : body);
  };
  const icon = byFile.get(urls.get('favicon.ico')!.slice('/console/assets/'.length))!;
  return {
    url: (name) => urls.get(name)!,
    async favicon(ctx) {
      send(ctx, icon, 'public, max-age=86400');
    },
    async serve(ctx) {
      const a = byFile.get(ctx.params.file!);
      if (!a) throw new GatewayError('not_found', 'No such asset.');
      send(ctx, a, IMMUTABLE);
    },
  };
}
