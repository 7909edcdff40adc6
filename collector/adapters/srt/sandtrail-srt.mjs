#!/usr/bin/env node
// sandtrail-srt: runs commands in Anthropic's sandbox runtime
// (@anthropic-ai/sandbox-runtime) and appends what its violation store
// records, one JSON line per violation, to a file that
// `sandtrail-collector --follow FILE -X input.format=srt` reads
// (collector/decoders/srt.c).
//
//   node sandtrail-srt.mjs --policy POLICY.json --out FILE [options] < COMMANDS
//
// COMMANDS is NDJSON, one {"id":"TASK/RUN/TOOL","command":"..."} per line,
// run one after the other. The id is handed to the runtime as the command id
// it attributes violations to; the store reports it base64-encoded
// (encodedCommand), from which the collector takes task and run. For each
// command one result line goes to stdout:
//   {"id":..,"exit_code":..,"stdout":..,"stderr":..}
// stderr as the runtime annotates it (a <sandbox_violations> block).
// See README.md next to this file.

import { spawn } from 'node:child_process';
import { closeSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import {
    SandboxManager,
    SandboxRuntimeConfigSchema,
} from '@anthropic-ai/sandbox-runtime';

const USAGE = `usage: sandtrail-srt --policy POLICY.json --out FILE [options] < COMMANDS.ndjson
  --policy FILE     sandbox policy: the runtime's settings (network.allowedDomains,
                    filesystem.allowWrite/denyWrite/denyRead, ...), as srt --settings
  --out FILE        NDJSON violations are appended here, one line each, flushed per line
  --cwd DIR         working directory of the commands (default: the current one)
  --timeout S       kill a command after S seconds (default 120)
  --settle MS       after a command exits, wait this long without a new violation
                    before the next one: the write observer reports over a socket
                    and may trail the exit (default 300)
  --no-exits        do not write a command-exit line (with exit code) per command
  --fsync           fsync the output after each line (default: write(2) only)
COMMANDS on stdin: one {"id":"TASK/RUN/TOOL","command":"shell command"} per line`;

function fail(msg, status = 64) {
    process.stderr.write(`sandtrail-srt: ${msg}\n`);
    process.exit(status);
}

let opts;
try {
    opts = parseArgs({
        options: {
            policy: { type: 'string' },
            out: { type: 'string' },
            cwd: { type: 'string' },
            timeout: { type: 'string', default: '120' },
            settle: { type: 'string', default: '300' },
            'no-exits': { type: 'boolean', default: false },
            fsync: { type: 'boolean', default: false },
            help: { type: 'boolean', short: 'h', default: false },
        },
        strict: true,
        allowPositionals: false,
    }).values;
} catch (e) {
    fail(`${e.message}\n${USAGE}`);
}
if (opts.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
}
if (!opts.policy || !opts.out)
    fail(`--policy and --out are required\n${USAGE}`);
const timeoutMs = Number(opts.timeout) * 1000;
const settleMs = Number(opts.settle);
if (!(timeoutMs > 0) || !(settleMs >= 0))
    fail('--timeout and --settle take a positive number');

let policy;
try {
    policy = JSON.parse(readFileSync(opts.policy, 'utf8'));
} catch (e) {
    fail(`could not read policy "${opts.policy}": ${e.message}`, 78);
}
const checked = SandboxRuntimeConfigSchema.safeParse(policy);
if (!checked.success) {
    const why = checked.error.issues
        .map(i => `${i.path.join('.') || '(top)'}: ${i.message}`)
        .join('; ');
    fail(`invalid policy "${opts.policy}": ${why}`, 78);
}

// The output is opened for appending and written with write(2), one call per
// line, so that a reader that follows the file never sees half a line and
// sees each line as soon as it is recorded.
let outFd;
try {
    outFd = openSync(opts.out, 'a', 0o640);
} catch (e) {
    fail(`could not open "${opts.out}": ${e.message}`, 73);
}
function emit(record) {
    writeSync(outFd, `${JSON.stringify({ harness: 'srt', ...record })}\n`);
    if (opts.fsync)
        fsyncSync(outFd);
}

let lastViolationAt = 0;
let written = 0;

// The store hands every subscriber its whole tail (the last 100) after each
// addition, not the new record: the total count says how many are new.
function subscribe() {
    const store = SandboxManager.getSandboxViolationStore();
    let seen = store.getTotalCount();
    return store.subscribe(tail => {
        const total = store.getTotalCount();
        const fresh = total - seen;
        seen = total;
        if (fresh <= 0)
            return; // clear() also notifies
        if (fresh > tail.length)
            process.stderr.write(`sandtrail-srt: ${fresh - tail.length} violations ` +
                                 'left the store before they were read\n');
        for (const v of tail.slice(-Math.min(fresh, tail.length))) {
            emit({
                hook: 'violation-store',
                line: v.line,
                command: v.command,
                encodedCommand: v.encodedCommand,
                timestamp: new Date(v.timestamp).toISOString(),
            });
            written++;
        }
        lastViolationAt = Date.now();
    });
}

function collect(stream) {
    const chunks = [];
    stream.on('data', c => chunks.push(c));
    return () => Buffer.concat(chunks).toString('utf8');
}

async function runOne(id, command) {
    const wrapped = await SandboxManager.wrapWithSandbox(
        command, undefined, undefined, undefined, { commandId: id, commandText: command });
    const child = spawn(wrapped, {
        shell: true,
        cwd: opts.cwd,
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true, // its own process group, so a timeout kills the tree
    });
    const out = collect(child.stdout);
    const err = collect(child.stderr);
    const timer = setTimeout(() => {
        try {
            process.kill(-child.pid, 'SIGKILL');
        } catch {
            /* already gone */
        }
    }, timeoutMs);
    const code = await new Promise(resolve => {
        child.on('error', e => {
            process.stderr.write(`sandtrail-srt: ${id}: ${e.message}\n`);
            resolve(127);
        });
        child.on('close', (c, sig) => resolve(c ?? 128 + (sig === 'SIGKILL' ? 9 : 15)));
    });
    clearTimeout(timer);
    SandboxManager.cleanupAfterCommand();
    // Writes the observer saw arrive over its socket, possibly after the exit.
    const exitedAt = Date.now();
    while (Date.now() - Math.max(exitedAt, lastViolationAt) < settleMs)
        await sleep(25);
    if (!opts['no-exits'])
        emit({
            hook: 'command-exit',
            commandId: id,
            command,
            exit_code: code,
            timestamp: new Date(exitedAt).toISOString(),
        });
    const stderr = SandboxManager.annotateStderrWithSandboxFailures(id, err());
    process.stdout.write(`${JSON.stringify({ id, exit_code: code, stdout: out(), stderr })}\n`);
}

async function main() {
    // true: start the write observer (Linux: apply-seccomp reports write
    // attempts; macOS: the seatbelt log), whose denials reach the store
    // beside the proxy's network denials
    await SandboxManager.initialize(checked.data, undefined, true);
    const unsubscribe = subscribe();
    let lineNo = 0, failed = 0;
    const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const raw of rl) {
        lineNo++;
        if (!raw.trim())
            continue;
        let req;
        try {
            req = JSON.parse(raw);
        } catch {
            req = null;
        }
        if (!req || typeof req.id !== 'string' || !req.id ||
            typeof req.command !== 'string') {
            process.stderr.write(`sandtrail-srt: stdin:${lineNo}: expected ` +
                                 '{"id":"TASK/RUN/TOOL","command":"..."}\n');
            failed++;
            continue;
        }
        await runOne(req.id, req.command);
    }
    unsubscribe();
    await SandboxManager.reset();
    closeSync(outFd);
    process.stderr.write(`sandtrail-srt: ${lineNo} lines, ${written} violations written\n`);
    return failed ? 1 : 0;
}

main().then(
    status => process.exit(status),
    e => fail(`${e instanceof Error ? e.message : String(e)}`, 70));
