/** Help text: the top-level usage lists every command; `tollgate <group> --help` adds the group's notes. */
import type { CommandGroup } from './context.ts';

const GLOBAL_HELP = `Options (every command):
  --admin-url URL    admin listener (default $TOLLGATE_ADMIN_URL, else http://127.0.0.1:$ADMIN_PORT, port 9090 by default)
  --public-url URL   public listener, for \`shares show\` (default $TOLLGATE_URL, else http://127.0.0.1:$PORT, port 8080 by default)
  --json             print the gateway's JSON response instead of a table
  -h, --help         show help

Environment:
  TOLLGATE_ADMIN_TOKEN   the admin token, required by every admin command. It is read only from the
                         environment, never from a flag, so it does not end up in shell history or \`ps\`.

Exit codes: 0 ok, 1 API error (code and message on stderr), 2 usage error.`;

function usageLine(g: CommandGroup, name: string): string {
  return `tollgate ${[g.name, name, g.commands[name]!.args].filter(Boolean).join(' ')}`;
}

function commandLines(g: CommandGroup): string[] {
  return Object.entries(g.commands).flatMap(([name, c]) => [`  ${usageLine(g, name)}`, `      ${c.summary}`]);
}

/** The top-level usage: every group and command. */
export function mainUsage(groups: CommandGroup[]): string {
  const body = groups.flatMap((g) => [`${g.name}: ${g.summary}`, ...commandLines(g), '']);
  return [
    'tollgate: manage a Tollgate gateway through its admin API, or run one.',
    '',
    'Usage: tollgate <group> <command> [args] [options]',
    '',
    ...body,
    GLOBAL_HELP,
    '',
    'More: tollgate <group> --help',
  ].join('\n');
}

/** One group's usage: its commands and notes. */
export function groupUsage(g: CommandGroup): string {
  return [`tollgate ${g.name}: ${g.summary}`, '', ...commandLines(g), '', ...g.notes.map((n) => `  ${n}`), '', GLOBAL_HELP].join('\n');
}

/** The short usage printed after a usage error: the command lines only, and where to read more. */
export function briefUsage(groups: CommandGroup[], group?: CommandGroup): string {
  const lines = (group ? [group] : groups).flatMap((g) => Object.keys(g.commands).map((name) => `  ${usageLine(g, name)}`));
  return ['Usage:', ...lines, '', `More: tollgate ${group ? `${group.name} ` : ''}--help`].join('\n');
}
