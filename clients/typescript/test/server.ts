/**
 * A live Countersign server for the tests: a fresh SQLite database in a temporary folder, made
 * with the project's own `manage.py` commands, served by the project's own server command
 * (`python -m config.serve`). Nothing of the server is imported: only its commands and its HTTP.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

export const REPOSITORY = resolve(import.meta.dirname, '..', '..', '..');
export const PYTHON = process.env.COUNTERSIGN_PYTHON ?? join(REPOSITORY, '.venv', 'bin', 'python');

export const APPROVER = 'ts-approver';
export const PASSWORD = 'ts-approver-password';
/** Held calls wait at the gate `quick` this many seconds before they expire. */
export const QUICK_GATE_SECONDS = 2;

// Under 500 a payment is allowed, over it held; a wire over 100 is refused; any booking is
// held at a gate whose calls expire quickly.
const RULES = `big: pay arg=amount max USD 500.00 -> gate
wires: wire arg=amount max USD 100.00 -> refuse
quick: book arg=amount max USD 0.01 -> gate quick
`;

// An approver as a person would be: the permission to decide calls, nothing more. Models are
// found by app label, so that no module path of the server is named here.
const PEOPLE = `
from django.apps import apps
from django.contrib.auth.models import Permission, User
user = User.objects.create_user(${JSON.stringify(APPROVER)}, password=${JSON.stringify(PASSWORD)})
user.user_permissions.add(Permission.objects.get(content_type__app_label="approvals", codename="decide_call"))
apps.get_model("approvals", "Gate").objects.filter(name="quick").update(timeout_seconds=${QUICK_GATE_SECONDS})
`;

const run = promisify(execFile);

export interface ServerInfo {
  url: string;
  port: number;
  token: string;
  databaseUrl: string;
  folder: string;
}

export function serverEnvironment(databaseUrl: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DJANGO_SETTINGS_MODULE: 'config.settings',
    DATABASE_URL: databaseUrl,
    ALLOWED_HOSTS: '127.0.0.1,localhost',
    COUNTERSIGN_RATE_LIMIT: '0',
    DEBUG: '0',
  };
  delete env.REDIS_URL; // one process, its own in-memory channel layer
  return env;
}

async function manage(databaseUrl: string, ...args: string[]): Promise<string> {
  const { stdout } = await run(PYTHON, ['manage.py', ...args], {
    cwd: REPOSITORY,
    env: serverEnvironment(databaseUrl),
  });
  return stdout;
}

/** A migrated database with the rules, an agent (its token returned) and an approver. */
export async function prepareDatabase(folder: string): Promise<{ databaseUrl: string; token: string }> {
  const databaseUrl = `sqlite:///${folder}/countersign.sqlite3`;
  await manage(databaseUrl, 'migrate', '--noinput', '-v0');
  // The pages name their CSS and scripts through the static files' manifest.
  await manage(databaseUrl, 'collectstatic', '--noinput', '-v0');
  const rules = join(folder, 'rules.txt');
  await writeFile(rules, RULES);
  await manage(databaseUrl, 'import_rules', rules);
  const created = await manage(databaseUrl, 'create_agent', 'ts-tests', '--mode', 'danger_full_access');
  const token = created.trim().split('\n').at(-1) ?? '';
  await manage(databaseUrl, 'shell', '-c', PEOPLE);
  return { databaseUrl, token };
}

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => done(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}

export interface RunningServer {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** The project's server on `port`, once it answers. */
export async function startServer(databaseUrl: string, port: number, log: string): Promise<RunningServer> {
  const out = openSync(log, 'a');
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(PYTHON, ['-m', 'config.serve', '--host', '127.0.0.1', '--port', String(port), '--no-access-log'], {
    cwd: REPOSITORY,
    // Its receipts name it as their issuer.
    env: { ...serverEnvironment(databaseUrl), COUNTERSIGN_PUBLIC_URL: url },
    stdio: ['ignore', out, out],
  });
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) {
      return;
    }
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
  };
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`the server exited at start:\n${(await readFile(log, 'utf8')).slice(-3000)}`);
    }
    try {
      const response = await fetch(`${url}/api/v1/currencies`, { signal: AbortSignal.timeout(1000) });
      if (response.ok) {
        return { url, port, process: child, stop };
      }
    } catch {
      // not listening yet
    }
    await new Promise((done) => setTimeout(done, 100));
  }
  await stop();
  throw new Error(`the server did not start:\n${(await readFile(log, 'utf8')).slice(-3000)}`);
}
