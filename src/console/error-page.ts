/**
 * The console's edge turns errors into HTML, in this one place: a whole page for a browser navigation,
 * or, for an htmx request, a message that htmx swaps into the page's flash area (HX-Retarget). The
 * status and the stable code stay those of SPEC §3; unexpected errors show no detail.
 */
import type { ServerResponse } from 'node:http';
import { GatewayError, ValidationError } from '../http/errors.ts';
import { html, type Html } from './html.ts';
import { messagePage, sendHtml } from './layout.ts';
import type { Assets } from './assets.ts';

const TITLES: Record<number, string> = {
  403: 'Not allowed',
  404: 'Not found',
  405: 'Not allowed',
  413: 'Too large',
  415: 'Not a form',
  422: 'Please check the form',
  429: 'Too many requests',
};

/** The field messages of a 422, as people read them (`name: String should have at least 1 character`). */
function describe(err: ValidationError): Html {
  return html`<ul>
    ${err.detail.map((d) => html`<li>${d.loc.slice(1).join('.') || 'form'}: ${d.msg}</li>`)}
  </ul>`;
}

export function createErrorPage(assets: Assets): (res: ServerResponse, err: unknown) => void {
  return (res, err) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const ve = err instanceof ValidationError ? err : undefined;
    const ge = err instanceof GatewayError ? err : ve ? undefined : new GatewayError('internal_error', 'Something went wrong; try again.');
    const status = ve ? 422 : ge!.status;
    const title = TITLES[status] ?? (status >= 500 ? 'Something went wrong' : 'Request refused');
    const message = ve ? describe(ve) : html`${ge!.message}`;
    if (ge?.headers) for (const h in ge.headers) res.setHeader(h, ge.headers[h]!);
    if (ge) res.setHeader('x-error-code', ge.code);
    if (res.req?.headers['hx-request'] === 'true') {
      sendHtml(res, status, html`<div class="flash error" role="alert"><strong>${title}.</strong> ${message}</div>`, {
        'hx-retarget': '#flash',
        'hx-reswap': 'innerHTML',
      });
      return;
    }
    sendHtml(res, status, messagePage(assets, title, html`${message} <br /><a href="/console/">Back to the console</a>`));
  };
}
