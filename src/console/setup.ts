/**
 * Builds the console (SPEC §9) from the gateway's services: its sessions, its routes behind their own
 * edge (CSRF check before routing, security headers on every response, errors as HTML), and the admin
 * routes that mint sign-in links. The gateway sends every /console path to `handler`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../config/schema.ts';
import type { Store } from '../store/types.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { RequestContext } from '../http/context.ts';
import { createRouter, type Route } from '../http/router.ts';
import { createEdge } from '../http/server.ts';
import type { KeyTable } from '../auth/key-table.ts';
import type { AccountService } from '../admin/account-service.ts';
import type { ShareService } from '../shares/service.ts';
import type { Usage } from '../usage/usage.ts';
import { loadAssets } from './assets.ts';
import { CONSOLE_HEADERS, createCsrfGuard } from './security.ts';
import { createConsoleSessions } from './sessions.ts';
import { consoleRoutes } from './routes.ts';
import { consoleAdminRoutes } from './admin-routes.ts';
import { createErrorPage } from './error-page.ts';
import type { FailureWindow } from '../auth/failure-window.ts';
import type { ClientAddress } from '../http/client-address.ts';
import { createBodyBudget, type BodyBudget } from '../limits/body-budget.ts';
import { MAX_FORM_BYTES } from './forms.ts';
import { createAccountGate } from '../limits/account-gate.ts';

export interface ConsoleDeps {
  config: Config['console'];
  store: Store;
  now: () => number;
  logger: Logger;
  metrics: Metrics;
  keys: KeyTable;
  accounts: AccountService;
  shares: ShareService;
  usage: Usage;
  /** The public listener's own URL once listening: the console's origin when console.public_url is unset. */
  listenerUrl: () => string;
  failedLogins: FailureWindow;
  clientAddress: ClientAddress;
  /** What `POST /admin/console/sessions` reads its body under: the admin listener's body budget (gateway.ts). */
  adminBodyBudget: BodyBudget;
  /** How long a form post may take to arrive (server.body_timeout_ms): then 408. */
  bodyTimeoutMs: number;
}

/** Form bytes one account's sessions may hold at once: 4 forms (MAX_FORM_BYTES each) still arriving; more → 429. */
const FORM_BYTES_PER_ACCOUNT = 4 * MAX_FORM_BYTES;
/** Form bytes the process holds at once for every console session: 64 forms; more → 503. */
const FORM_BYTES = 64 * MAX_FORM_BYTES;

/**
 * A member's console requests under way at once, per account, and how many more wait their turn before
 * a 429 (docs/console.md "One account's pages take turns"). A person clicks one page at a time; the
 * margin is for tabs opened together and htmx's in-row actions.
 */
export const CONSOLE_RUNNING_PER_ACCOUNT = 1;
export const CONSOLE_WAITING_PER_ACCOUNT = 16;

export interface Console {
  readonly routes: readonly Route[];
  readonly adminRoutes: readonly Route[];
  readonly handler: (req: IncomingMessage, res: ServerResponse) => void;
}

/**
 * True for the paths the console serves (`/console`, `/console/…`, `/console?…`), and `/favicon.ico`,
 * which browsers ask the origin for: the console's icon, so a tab on the console finds no 404.
 */
export function isConsolePath(url: string): boolean {
  if (url.startsWith('/console')) return url.length === 8 || url[8] === '/' || url[8] === '?';
  return url.startsWith('/favicon.ico') && (url.length === 12 || url[12] === '?');
}

export function createConsole(d: ConsoleDeps): Console {
  const publicUrl = () => d.config.publicUrl ?? d.listenerUrl();
  const sessions = createConsoleSessions({ store: d.store, now: d.now, publicUrl, sessionTtlSeconds: d.config.sessionTtlSeconds });
  const assets = loadAssets();
  const routes = consoleRoutes({
    sessions,
    keys: d.keys,
    accounts: d.accounts,
    shares: d.shares,
    store: d.store,
    usage: d.usage,
    now: d.now,
    assets,
    failedLogins: d.failedLogins,
    clientAddress: d.clientAddress,
    confirmGrantMicros: Math.round(d.config.confirmGrantCredits * 1e6),
    // A form is read under a budget like every other body (SPEC §13): timed, and bounded per account.
    forms: createBodyBudget(FORM_BYTES, undefined, { perKey: FORM_BYTES_PER_ACCOUNT, timeoutMs: d.bodyTimeoutMs }),
    gate: createAccountGate({ running: CONSOLE_RUNNING_PER_ACCOUNT, waiting: CONSOLE_WAITING_PER_ACCOUNT }),
  });
  const csrf = createCsrfGuard(publicUrl, (r) =>
    d.logger.warn(r, 'console change refused: its Origin is not the console origin (console.public_url)'),
  );
  const handler = createEdge({
    router: createRouter(routes),
    logger: d.logger,
    metrics: d.metrics,
    listener: 'public',
    headers: CONSOLE_HEADERS,
    before: (req) => csrf(req),
    sendError: createErrorPage(assets),
  });
  return { routes, adminRoutes: consoleAdminRoutes({ sessions, bodyBudget: d.adminBodyBudget }), handler };
}
