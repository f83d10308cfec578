/**
 * The `tollgate` CLI: `tollgate <group> <command> [args] [options]` (SPEC §2). `run` takes the argv and
 * the outside world and resolves with the exit code, so tests can run it in-process or as a child.
 */
import { InputError, locate, parse, UsageError } from './args.ts';
import { ApiError } from './client.ts';
import { createContext, type CliDeps, type CommandGroup } from './context.ts';
import { consoleGroup } from './console.ts';
import { creditsGroup } from './credits.ts';
import { keysGroup } from './keys.ts';
import { ledgerGroup } from './ledger.ts';
import { serveGroup } from './serve.ts';
import { sharesGroup } from './shares.ts';
import { spoolGroup } from './spool.ts';
import { usageGroup } from './usage-group.ts';
import { briefUsage, groupUsage, mainUsage } from './usage.ts';

/** Every command group, in the order the help lists them. */
export const GROUPS: CommandGroup[] = [keysGroup, creditsGroup, usageGroup, ledgerGroup, sharesGroup, consoleGroup, serveGroup, spoolGroup];

const wantsHelp = (argv: string[]) => argv.some((a) => a === '--help' || a === '-h');

/** Runs one invocation; resolves with the exit code: 0 ok, 1 API error, 2 usage error. */
export async function run(argv: string[], deps: CliDeps): Promise<number> {
  const { io } = deps;
  const [groupName, commandName] = locate(argv);
  if (groupName === undefined || groupName === 'help') {
    const help = wantsHelp(argv) || groupName === 'help';
    if (help) io.out(mainUsage(GROUPS));
    else io.err(`error: missing command\n\n${briefUsage(GROUPS)}`);
    return help ? 0 : 2;
  }
  const group = GROUPS.find((g) => g.name === groupName);
  if (!group) {
    io.err(`error: unknown command ${JSON.stringify(groupName)}\n\n${briefUsage(GROUPS)}`);
    return 2;
  }
  if (wantsHelp(argv)) {
    io.out(groupUsage(group));
    return 0;
  }
  const standalone = group.commands[''];
  const command = standalone ?? (commandName === undefined ? undefined : group.commands[commandName]);
  if (!command) {
    io.err(
      `${commandName === undefined ? `error: missing command after "tollgate ${group.name}"` : `error: unknown command "tollgate ${group.name} ${commandName}"`}\n\n${briefUsage(GROUPS, group)}`,
    );
    return 2;
  }
  try {
    const skip = standalone ? [group.name] : [group.name, commandName!];
    const { values, positionals } = parse(argv, command.options ?? {}, skip, group.name);
    await command.run(createContext(deps, values), positionals);
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      const g = GROUPS.find((x) => x.name === e.group);
      io.err(`error: ${e.message}\n\n${briefUsage(GROUPS, g)}`);
      return 2;
    }
    if (e instanceof InputError) {
      io.err(`error: ${e.message}`);
      return 2;
    }
    if (e instanceof ApiError) {
      io.err(
        [`error: ${e.code}${e.status === undefined ? '' : ` (HTTP ${e.status})`}: ${e.message}`, ...e.details.map((d) => `  ${d}`)].join(
          '\n',
        ),
      );
      return 1;
    }
    throw e;
  }
}
