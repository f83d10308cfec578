/**
 * The page shell: head (stylesheet, htmx and the console script, all from /console/assets/), the top
 * bar with the account's sections and the signed-in identity, and a flash area that htmx fills with
 * errors. Each section of an account is one entry of SECTIONS; a new page (usage) is one more entry.
 */
import type { ServerResponse } from 'node:http';
import { html, type Html } from './html.ts';
import type { Assets } from './assets.ts';
import type { Viewer } from './sessions.ts';

/** An account's sections, in nav order. */
export const SECTIONS = [
  { id: 'keys', label: 'API keys' },
  { id: 'credit', label: 'Credit' },
  { id: 'usage', label: 'Usage' },
  { id: 'shares', label: 'Shares' },
] as const;
export type SectionId = (typeof SECTIONS)[number]['id'] | 'accounts';

/** `/console/accounts/<id>/<section>`, the account id percent-encoded. */
export function accountPath(account: string, rest = ''): string {
  return `/console/accounts/${encodeURIComponent(account)}${rest}`;
}

/**
 * htmx settings (read from this meta tag): no history snapshots (a page may hold a key shown once, and
 * htmx would copy it into localStorage), no eval and no inline styles (CSP), requests to this origin
 * only, and error answers swapped too (the server retargets them to #flash).
 */
const HTMX_CONFIG = JSON.stringify({
  historyCacheSize: 0,
  refreshOnHistoryMiss: true,
  includeIndicatorStyles: false,
  allowEval: false,
  allowScriptTags: false,
  selfRequestsOnly: true,
  responseHandling: [
    { code: '204', swap: false },
    { code: '[2345]..', swap: true },
  ],
});

export interface PageOptions {
  title: string;
  viewer: Viewer | null;
  /** The account being viewed, for the nav. */
  account?: string | undefined;
  section?: SectionId;
  body: Html;
}

/** A whole HTML document. */
export function page(assets: Assets, o: PageOptions): Html {
  const v = o.viewer;
  const nav = [
    v?.account === null && html`<a href="/console/accounts" ${o.section === 'accounts' ? html`aria-current="page"` : ''}>Accounts</a>`,
    o.account !== undefined &&
      SECTIONS.map(
        (s) => html`<a href="${accountPath(o.account!, `/${s.id}`)}" ${o.section === s.id ? html`aria-current="page"` : ''}>${s.label}</a>`,
      ),
  ];
  const who = v
    ? html`<div class="who">
        <span>${v.account === null ? html`<span class="badge">operator</span>` : html`Account <strong>${v.account}</strong>`}</span>
        <form method="post" action="/console/logout"><button class="small" type="submit">Sign out</button></form>
      </div>`
    : '';
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="htmx-config" content="${HTMX_CONFIG}" />
        <title>${o.title} · Tollgate console</title>
        <link rel="icon" href="${assets.url('favicon.ico')}" sizes="16x16 32x32 48x48" />
        <link rel="stylesheet" href="${assets.url('console.css')}" />
        <script src="${assets.url('htmx.js')}" defer></script>
        <script src="${assets.url('console.js')}" defer></script>
      </head>
      <body>
        <header class="top">
          <a class="brand" href="/console/">Tollgate</a>
          <nav aria-label="Sections">${nav}</nav>
          ${who}
        </header>
        <main>
          <div id="flash" role="status" aria-live="polite"></div>
          ${o.body}
        </main>
      </body>
    </html> `;
}

/** A short page with one message (sign-in errors, signed out, not found). */
export function messagePage(assets: Assets, title: string, message: Html | string, viewer: Viewer | null = null): Html {
  return page(assets, {
    title,
    viewer,
    body: html`<div class="message">
      <div class="panel">
        <h1>${title}</h1>
        <p class="sub">${message}</p>
      </div>
    </div>`,
  });
}

/** Sends a document or fragment; the security headers are already set by the console's edge. */
export function sendHtml(res: ServerResponse, status: number, body: Html, headers?: Record<string, string>): void {
  const text = body.value;
  res.statusCode = status;
  if (headers) for (const h in headers) res.setHeader(h, headers[h]!);
  res.setHeader('content-type', 'text/html; charset=utf-8');
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

/** Time as people read it: `2026-11-25 08:04 UTC`. */
export function when(iso: string | undefined): string {
  if (!iso) return '—';
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}
