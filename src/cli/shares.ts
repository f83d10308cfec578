/**
 * `tollgate shares …`: publish a snapshot for an account (uploading its files straight to S3 through
 * the presigned URLs the gateway returns), revoke a share, and read one as the public does (SPEC §1.4).
 */
import { readFile } from 'node:fs/promises';
import { expectPositionals, InputError, needString, UsageError } from './args.ts';
import { ApiError } from './client.ts';
import type { CliContext, CommandGroup } from './context.ts';
import { contentTypeOf } from './content-type.ts';
import { cell, fields, json, table } from './output.ts';

const G = 'shares';

interface Upload {
  name: string;
  url: string;
  method?: string;
  headers?: Record<string, string>;
  expires_at?: string;
}

interface LocalFile {
  name: string;
  path: string;
  bytes: Buffer;
  contentType: string;
}

interface ShareBody {
  slug: string;
  created_at: string;
  snapshot: { title?: string; model?: string; messages?: Array<{ role?: string; content?: unknown }> };
  files?: Array<{ name: string; content_type: string; size: number; url: string; expires_at: string }>;
}

async function readBytes(path: string, what: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (e) {
    throw new InputError(`cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/** `--upload name=path` flags → files read into memory. Whole buffers: the presigned PUT signs content-length, so the size must be known and the bytes must match it. */
async function readUploads(specs: string[]): Promise<LocalFile[]> {
  const files: LocalFile[] = [];
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    const name = spec.slice(0, eq);
    const path = spec.slice(eq + 1);
    if (eq < 1 || path === '') throw new UsageError(`--upload wants name=path, got ${JSON.stringify(spec)}`, G);
    if (files.some((f) => f.name === name)) throw new UsageError(`--upload names must be unique: ${JSON.stringify(name)} given twice`, G);
    files.push({ name, path, bytes: await readBytes(path, 'upload'), contentType: contentTypeOf(path) });
  }
  return files;
}

/** PUTs one file to its presigned URL with exactly the headers the gateway returned. */
async function upload(ctx: CliContext, file: LocalFile, u: Upload, slug: string): Promise<void> {
  const headers = { ...u.headers };
  // fetch computes content-length from the body itself (and forbids setting it); the signed value is the same size.
  delete headers['content-length'];
  delete headers.host;
  let res: Response;
  try {
    res = await ctx.fetch(u.url, { method: u.method ?? 'PUT', headers, body: file.bytes, signal: AbortSignal.timeout(10 * 60_000) });
  } catch (e) {
    throw new ApiError(
      'upload_failed',
      `upload of ${file.name} failed: ${(e as Error).message}; share ${slug} was created without it (revoke it with: tollgate shares revoke ${slug})`,
    );
  }
  const text = await res.text();
  if (!res.ok)
    throw new ApiError(
      'upload_failed',
      `upload of ${file.name} failed: HTTP ${res.status} ${text.slice(0, 200)}; share ${slug} was created without it (revoke it with: tollgate shares revoke ${slug})`,
      res.status,
    );
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p) =>
        p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string'
          ? (p as { text: string }).text
          : `<${String((p as { type?: unknown })?.type ?? 'part')}>`,
      )
      .join(' ');
  }
  return content === null || content === undefined ? '' : JSON.stringify(content);
}

function printShare(ctx: CliContext, s: ShareBody): void {
  const messages = s.snapshot.messages ?? [];
  const lines = [
    fields([
      ['slug', s.slug],
      ['created_at', s.created_at],
      ['title', cell(s.snapshot.title)],
      ['model', cell(s.snapshot.model)],
      ['messages', String(messages.length)],
    ]),
  ];
  if (messages.length) lines.push('', ...messages.map((m) => `[${m.role ?? '?'}] ${contentText(m.content)}`));
  const files = s.files ?? [];
  if (files.length)
    lines.push(
      '',
      table(
        ['name', 'content_type', 'size', 'expires_at', 'url'],
        files.map((f) => [f.name, f.content_type, String(f.size), f.expires_at, f.url]),
      ),
    );
  ctx.io.out(lines.join('\n'));
}

/** The `shares` command group. */
export const sharesGroup: CommandGroup = {
  name: G,
  summary: 'conversation shares: create (with file uploads), revoke, show',
  notes: [
    '--file holds the snapshot JSON: {"title"?, "model"?, "messages": [...], "metadata"?}.',
    '--upload name=path (repeatable) declares a file (size, and content type from the extension) and PUTs its bytes to the presigned URL.',
    '`shares show` reads the share as anyone with the slug can (no token): --public-url, else $TOLLGATE_URL.',
    '`shares revoke --json` prints {"slug", "revoked": true}: the gateway answers 204 without a body.',
  ],
  commands: {
    create: {
      args: '--account A --file snapshot.json [--upload name=path ...]',
      summary: 'publish a snapshot for an account and upload its files',
      options: { account: { type: 'string' }, file: { type: 'string' }, upload: { type: 'string', multiple: true } },
      async run(ctx, pos) {
        expectPositionals(pos, [], G);
        const account = needString(ctx.values, 'account', G);
        const file = needString(ctx.values, 'file', G);
        // The gateway returns a snapshot byte for byte as published (SPEC §2a), so the file's text is
        // spliced into the body as written, not re-serialised (which would turn 1.0 into 1, say).
        const snapshot = (await readBytes(file, 'snapshot'))
          .toString('utf8')
          .replace(/^\uFEFF/, '')
          .trim();
        try {
          JSON.parse(snapshot);
        } catch (e) {
          throw new InputError(`${file} is not valid JSON: ${(e as Error).message}`);
        }
        const locals = await readUploads((ctx.values.upload as string[] | undefined) ?? []);
        const files = locals.map((f) => ({ name: f.name, content_type: f.contentType, size: f.bytes.length }));
        const admin = ctx.admin();
        const body = `{"account":${JSON.stringify(account)},"snapshot":${snapshot}${files.length ? `,"files":${JSON.stringify(files)}` : ''}}`;
        const { body: createdBody } = await admin.send('POST', '/admin/shares', body);
        const created = createdBody as { slug: string; created_at: string; uploads?: Upload[] };
        for (const f of locals) {
          const u = created.uploads?.find((x) => x.name === f.name);
          if (!u)
            throw new ApiError(
              'upload_failed',
              `the gateway returned no upload URL for ${f.name}; share ${created.slug} was created without it`,
            );
          await upload(ctx, f, u, created.slug);
          ctx.io.err(`uploaded ${f.name} (${f.bytes.length} bytes, ${f.contentType})`);
        }
        ctx.io.out(
          ctx.json
            ? json(createdBody)
            : fields([
                ['slug', created.slug],
                ['created_at', created.created_at],
                ['files', locals.length ? locals.map((f) => f.name).join(', ') : '-'],
              ]),
        );
      },
    },
    revoke: {
      args: '<slug>',
      summary: 'revoke a share (every instance answers 410 within 1 s)',
      async run(ctx, pos) {
        const [slug] = expectPositionals(pos, ['slug'], G);
        await ctx.admin().call('DELETE', `/admin/shares/${encodeURIComponent(slug!)}`);
        ctx.io.out(ctx.json ? json({ slug, revoked: true }) : `revoked ${slug}`);
      },
    },
    show: {
      args: '<slug>',
      summary: 'read a share through the public API, as its readers see it',
      options: {},
      async run(ctx, pos) {
        const [slug] = expectPositionals(pos, ['slug'], G);
        const { body } = await ctx.publicApi().call('GET', `/v1/shares/${encodeURIComponent(slug!)}`);
        if (ctx.json) return ctx.io.out(json(body));
        printShare(ctx, body as ShareBody);
      },
    },
  },
};
