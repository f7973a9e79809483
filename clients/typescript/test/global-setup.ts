/**
 * One server for the whole run (each test file reads it with `inject('server')`), and the
 * package built, for the tests that run it as a user would (examples, a second process).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

import type { TestProject } from 'vitest/node';

import { type RunningServer, type ServerInfo, freePort, prepareDatabase, startServer } from './server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    server: ServerInfo;
  }
}

const PACKAGE = resolve(import.meta.dirname, '..');

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const folder = await mkdtemp(join(tmpdir(), 'countersign-ts-'));
  const build = promisify(execFile)('npm', ['run', '--silent', 'build'], { cwd: PACKAGE });
  let server: RunningServer | undefined;
  const teardown = async (): Promise<void> => {
    await server?.stop();
    await rm(folder, { recursive: true, force: true });
  };
  try {
    const { databaseUrl, token } = await prepareDatabase(folder);
    const port = await freePort();
    server = await startServer(databaseUrl, port, join(folder, 'server.log'));
    await build;
    project.provide('server', { url: server.url, port, token, databaseUrl, folder });
  } catch (error) {
    await build.catch(() => undefined);
    await teardown();
    throw error;
  }
  return teardown;
}
