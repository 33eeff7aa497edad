"""The hand-written notes of docs/cli.md: what each command reads or writes, and its JSON.

:data:`NOTES` holds, for each command (``""`` for ``ledger`` itself), the text printed
after its ``--help`` in its section; :mod:`tools.clidoc` puts them into the page.
"""

from __future__ import annotations

from tools.clidoc_shapes import shape

__all__ = ["NOTES"]

NOTES: dict[str, str] = {
    "": """\
`ledger --version` prints the version of the installed package; `-h` is short for
`--help` everywhere.
""",
    "runs": f"""\
Reads the store. One row per run, oldest first: its id, when its first and its last
record were written, its writer (`host:pid`; `-` when none is recorded, as for an
imported run), how many effects it claimed, and how many of them have each verdict.
The writer is the last process that wrote the run: after a recovery, the process that
recovered it.

`--json` prints an array of [run](#run) objects, oldest first.

{shape("run")}""",
    "show": f"""\
Reads the store. RUN is a run id or a unique prefix of one, in lowercase hex, the way
git takes commit prefixes; a RUN that matches no run or more than one is a usage
mistake (exit 2). Without RUN, it shows the run that wrote last (the newest record of
the store), and says which on stderr; on a store with no run, that is a usage mistake.
The run is validated as `EffectLog.load` validates it: a record that
does not validate is an error (exit 1), never skipped. It prints the writer, then the
timeline (every claim, outcome and observation in `seq` order), then one row per
effect: its operation, the execution and impact of its current outcome, its verdict,
whether its impact is unresolved, and the observations that are evidence for it or
stale.

The text is made to be read in about 120 columns. When every record of the run is of
one day, the title says which (UTC) and each record shows its time of day. Ids longer
than 15 characters (and idempotency keys) show their first 12, then `...`; a unique
prefix names a run or an effect anywhere a command takes one, and each effect's whole
id starts its line of advice at the end. A locator longer than 40 characters shows its
end, `...` first (a path's file name is at its end), and a claim does not name its one
resource again in what it expects of it. A record's text goes on over several lines,
under its column, broken after a `;`.

In the timeline a claim shows its step, when it has one, and its recorded arguments;
an outcome shows its recorded result (`result null` for a recorded `null`). Nothing is
shown of a value that was not recorded. Each is compact JSON, cut after 50 characters
(40 for a step) with the whole length said, `... (2417 chars)`; `--json` and
`ledger export` hold them whole.

When the run asked for approvals, a table after the effects gives each request: its
state by the store's clock, who decided it and through what, when, the claim that used
it, and when an unanswered one expires; a claim made under an approval says which.

`--json` prints one [run report](#run-report) object.

{shape("run report")}
{shape("writer")}
{shape("record entry")}""",
    "status": f"""\
Reads the store. One row per claimed effect across all runs, oldest claim first, with
the verdict the `effect_status` view computes (the same rules as `assess`; see
[forensics.md](forensics.md#effect_status)), its kind and what to do next (`decide`:
`done`, `wait`, `retry` or `escalate`). `--run` keeps the effects of one run (an
id or a unique prefix). `--unresolved` keeps the effects whose impact is unresolved
(pending, unverified or contradicted, with an impact that is not `none`): the incident
list after a crash. Every run in scope is validated: `--unresolved` also shows every
effect of a run that does not validate (its `run_problem` set), none of whose verdicts
can be believed, a warning on standard error names each such run, and the command
exits 1.

Below the effects, a second table gives every approval request of the runs in scope
(see `ledger approvals`): its state by the store's clock, who decided and when, and the
effect whose claim used it.

`--json` prints an array of [effect row](#effect-row) objects, oldest claim first; a
claim made under an approval carries it as an [approval summary](#approval-summary).

`--attention` keeps only what needs a person, most urgent first (see
[operations.md](operations.md)): effects whose next step is `escalate` (urgency 1: a
reported success the evidence contradicts; 2: irreversible; 3: a write that may have
landed), then claims with no outcome whose run no live process holds (4: recover the
run), then the calls waiting for a person's approval (5: `ledger approve` or `ledger
deny`; they have not run), oldest request first. Whether a run is held is asked of its
lock, never taken. Each is printed with the command that settles it; the command exits
1 when anything is listed, 0 when nothing is. `--json` then prints an array of
[effect row](#effect-row) objects with three more keys: `urgency` (an integer, 1 to 5
as above), `reason` (why a person is needed) and `action` (the command that settles
it; `NAME` and the choice between `--applied` and `--not-applied` are the person's). A
call waiting for approval has no claim yet: its row has the request's `seq`, the effect
id its claim will carry, its operation and step, `next_step` `wait`, its `approval`,
and `null` for what only a claim has (`verdict`, `kind`, `claimed_at`, ...).

{shape("effect row")}
{shape("approval summary")}""",
    "report": """\
Reads the store, and writes FILE.html (replaced if it exists, mode 0600 like the store:
the page holds what the store holds), then prints its absolute path. One self-contained
HTML page for a person to look at after an incident, to open in any browser, mail or
attach to a ticket: its style and its little script (the filters) are inline, and it
loads nothing, from anywhere (its Content-Security-Policy says `default-src 'none'`
and allows only its own style and script, by hash).

- **Needs a person**, first: what `ledger status --attention` lists, for the runs the
  page shows, and the calls waiting for a person's approval (as `ledger approvals`),
  each with its arguments, digest, requester and expiry and the exact `ledger approve`
  and `ledger deny` commands.
- **Approvals**: every approval request of the runs shown, with its state by the
  store's clock (pending, granted, used, denied, expired), who decided it, when, through
  what (`command`, `program`, `elicitation`), the note, and the claim that used it.
- **Incidents**: every effect whose impact is unresolved, in the runs the
  page shows (the rows of `ledger status --unresolved`), with its run, operation, kind,
  execution, impact, verdict, when it was claimed, its decision and the reason for it
  (`decide`), and the exact commands for the next step: `ledger recover RUN` for a
  claim that has no outcome (once its worker is dead); else the two `ledger resolve`
  commands that record a person's word once they have checked whether it landed.
- **Runs**: a summary row per run (first and last record, writer, claims, how many
  effects have each verdict, and whether its rows and hash chain validate). The page
  runs `ledger verify` on the whole store when it is written and says what it found;
  a run that does not validate is listed, with its problem, but not drawn, and the
  command exits 1 after writing the page, as `runs` and `status` do.
- **Timelines**: per run, an SVG drawing with one lane per effect, from its claim to
  the outcome that ends it (dashed when none does), records placed in `seq` order with
  times on the axis and a dotted line at each pause of 10 s or more. Colour gives the
  verdict and so does a label with a symbol (✓ verified, ✗ failed, … pending,
  ? unverified, ! contradicted); an interrupted outcome is a red cross labelled
  `interrupted (recovery)` or `interrupted (worker)`; triangles are observations of the
  effect's targets, filled when the verdict rests on them. Hovering a lane or a mark
  shows its fields; below the drawing, a table gives every field of every record drawn,
  with a claim's step and recorded arguments and an outcome's recorded result as compact
  JSON (cut after 2,000 characters, 200 in a tooltip; nothing for a value not recorded).

Without RUN, every run of the store; RUN (an id or a unique prefix, several allowed)
chooses runs, as `show` takes them. `--unresolved` keeps the runs holding an effect
whose impact is unresolved. `--since TIME` keeps the runs that wrote a record at or
after TIME: an ISO 8601 date or time (`2026-03-01`, `2026-03-01T09:15:00`, UTC unless
it carries an offset) or a duration back from now (`90s`, `30m`, `2h`, `7d`). A TIME
that is neither is a usage mistake (exit 2).

Large runs are summarised so that the page opens quickly: a timeline draws at most 200
lanes (every effect with unresolved impact first, then the others in claim order), and
per lane at most 40 observations besides those its verdict rests on or found stale; a
run's table lists the records drawn, at most 1,000, folded away when there are more than
300; at most the 20 newest runs are drawn, the others only summarised. The page says
what it left out each time, and `ledger show RUN` or `ledger export RUN` lists
everything. A run of 10,000 records gives a page of about 1 MB in a few seconds.
""",
    "approvals": f"""\
Reads the store. The inbox of the calls waiting for a person's approval, oldest request
first, across every run (or of RUN, an id or a unique prefix): each with its run, the
request id, the tool, the action digest (its first 12 characters: what an approval is
bound to; `--json` has it whole), the requesting process (OS user and host, program,
pid), its age and when it expires, and the arguments as recorded (compact JSON, cut
after 60 characters; `not recorded` when they were not). Then, for each, the `ledger
approve` command that grants exactly that call. Age and expiry are by the store's clock,
which is also what decides expiry when an answer is written. `--all` lists every
request whatever its state: `pending`, `granted` (not yet used), `used` (the claim made
under it is in the run), `denied`, or `expired` (unanswered past its expiry: derived
from the clock, nobody's answer), with who decided it (and through what: `command`,
`program`, `elicitation`) and the effect whose claim used it. Every run holding a
request is validated as `EffectLog.load` validates it: one that does not is left out,
named in a warning on standard error, and the command exits 1.

`--json` prints an array of [approval](#approval) objects, oldest request first.

{shape("approval")}""",
    "approve": """\
Writes to the store. Grants APPROVAL (a request id of RUN, or a unique prefix of one; a
prefix that names none or several is a usage mistake, exit 2): the exact call it asks
for may now run, once. The answer is a record of the run, chained like the others,
with the command's process beside `--by` (source `command`, the OS user, host, program
and pid); the worker's next identical call claims under it and runs, and a second call
asks again. It prints what it approves (the tool, the recorded arguments, the whole
action digest, the effect id its claim will carry, who asked and when) and the
decision. `--expect-digest` takes the start of the digest you were shown (8 hex
characters or more, as `ledger approvals` prints 12): when the request's digest does not
start with it, nothing is written (exit 1). A request already decided, or expired by
the store's clock (which the store checks again as it writes), is refused the same way.
The run is loaded as a worker loads it.

`--json` prints one [approval](#approval) object: the request as it now reads, with
its decision.""",
    "deny": """\
Writes to the store. Denies APPROVAL (as for `ledger approve`): the call it asks for
must not run. The worker's next attempt at the same call raises `ApprovalDenied`
carrying `--by` and `--note`; its decision is `denied`. A request already decided, or
expired by the store's clock, is refused (exit 1) and nothing is written.

`--json` prints one [approval](#approval) object: the request as it now reads, with
its decision.""",
    "resolve": """\
Writes to the store. After a person has checked the world, records what they found
about EFFECT of RUN (a run id or a unique prefix): `--applied` (it landed) or
`--not-applied` (it did not); one of the two is required. `--by` names who checked, and
`--note` says what they saw. The resolution is a record of the run, append-only and
chained like the others; an effect is resolved at most once (a second resolve is an
error, exit 1). It records the command's process beside `--by` (origin `person`, the OS
user, host, program and pid), which `ledger show` prints. It leaves the verdict as the
evidence says, takes the effect off the incident list (`status --unresolved`), and sets
its next step: `done` when applied,
`retry` (with the same idempotency key) when not
([concepts.md](concepts.md#kinds-keys-and-decisions)).
The run is loaded as a worker loads it, so it is refused while another process is
recovering it.

`--json` prints one [resolution](#resolution) object: the one written.""",
    "recover": f"""\
Writes to the store. To every claim of the run that has no outcome at all it appends
an outcome `interrupted`, impact `possible`, `replayed: true`, in one transaction, as
`EffectLog.recover_interrupted` does; claims with a `running` outcome are left alone
(their call may still be running). Recovery is idempotent: a second time there is
nothing to recover. It never says that an effect happened: observe the resources
afterwards ([concepts.md](concepts.md#recovery)).

A run is in use while a live process has it loaded (an `EffectLog` of it is open, even
one that only reads): that process holds a lock on the run in the store's
`ledger.lock`, which the kernel drops when the process exits or is killed, whatever
its pid namespace or container ([storage.md](storage.md#liveness)). The recorded
writer shown by `runs` plays no part. RUN (a run id or a unique prefix of one) is
refused while in use (exit 1, naming its last recorded writer); `--force` recovers it
all the same, for a process you know to be dead or hung whose lock the kernel still
holds (a stopped process, say): that process's next write then fails. `--dead`
considers every run with a claim that has no outcome and recovers those no live
process has loaded; the others are left alone, and the output says why. Give RUN or
`--dead`, not both.

Recovers running at the same moment do not collide: the lock lets one recover a run,
and the others leave it alone (`another process is recovering it`) and exit 0. No
claim is ever marked interrupted twice.

`--json` prints an array of [recovery](#recovery) objects, one per run considered (an
empty array when `--dead` finds nothing to recover).

{shape("recovery")}""",
    "verify": f"""\
Reads the store. Checks the database file (`PRAGMA integrity_check`), that the schema
is at the current revision with every guard (trigger, index, view) in place, that every
record belongs to a run, and that every run loads and validates as `EffectLog.load`
would load it (its chain, and that every `recorded_at` is in the form ledger writes and
no outcome is dated before its claim). Each problem is one line: `integrity: ...`, `schema: ...` or
`run <run_id>: ...`. Exits 0 when there is none, else 1, with or without `--json`.

`--json` prints one [verify report](#verify-report) object.

{shape("verify report")}""",
    "export": f"""\
Reads the store. RUN is a run id or a unique prefix of one. The run is validated first,
and nothing is printed if a record does not validate (exit 1). The format is the one of
the earlier file-based effect logs, which `ledger import` reads back: compact JSON, one
record per line in `seq` order, each line ending with a newline. `-o FILE` writes FILE
instead of standard output: a new file, mode 0600, renamed into place, so an existing
FILE is replaced, a symlink too, never written through.

It prints one [exported line](#exported-line) object per line. A claim carries its
`step` and recorded `args`, an outcome its recorded `result` and `result_recorded`,
whole; approval requests and decisions are lines of their own; `import` reads them
back, and a run exported then imported verifies.

{shape("exported line")}""",
    "import": f"""\
Writes to the store, and creates it if it does not exist. Each FILE becomes a new run,
all or nothing: the whole file is read and validated (every line an
[exported line](#exported-line), `seq` 1, 2, 3, ... without a gap, a history a durable
run can hold) before one transaction writes it. Every `recorded_at` must be exactly in
the form ledger writes, `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (not `Z`, not without the
microseconds), and no outcome may be recorded before its claim; either is refused,
naming the line and `recorded_at`; `verify` and `EffectLog.load` apply the same rules.
(A ledger dates an outcome no earlier than its claim, even when the wall clock stepped
back between the two; a run written by an older version whose clock did so is refused
here, as by `verify` and `load`.) The run id is the file's name without
`.jsonl` (32 lowercase hex), or `--run` for a single file; a run the store already
holds is refused. A final line cut short by a crash mid-append (not JSON) is ignored
and reported. Any other malformed or forged line refuses the file, naming the line
(exit 1), and nothing of that file is written; the files before it stay imported.
Symlinks, files with more than one hard link and files that are not regular files are
refused too. Lines exported before claims had a step and recorded arguments, and
outcomes a recorded result, still import: their claims have no step and no recorded
arguments, their outcomes no recorded result; a file without approval records imports
as before. The store chains the imported records afresh, recorded values included. The
store's guards hold an imported approval to its clock as they hold a worker's: a
decision, or a claim made under an approval, whose request has expired by the store's
clock is refused, so a run that used approvals imports while they are unexpired.

`--json` prints an array of [imported file](#imported-file) objects, one per file, in
the order given.

{shape("imported file")}""",
    "head": f"""\
Reads the store. Checks the run's whole hash chain (every record row carries the hash
of the one before it, see [forensics.md](forensics.md#9-verify-a-runs-hash-chain)) and
prints its head, `RUN:SEQ:HASH`. The chain shows any change inside a run; keeping the
head somewhere the store's users cannot write also shows a run that was truncated, or
whose chain was recomputed after a change: `ledger verify --anchor RUN:SEQ:HASH`.

`--json` prints one [run head](#run-head) object.

{shape("run head")}""",
    "migrate": f"""\
Writes the store: creates it (a directory and its database, or the tables of a
PostgreSQL schema), or applies the migrations it lacks, exactly as a worker's first
write would, with every check of its files and schema. It prints what it did: created,
upgraded from one schema revision to the next, or already at the newest. Running it
again changes nothing. A store at a revision this version does not know (a newer
version wrote it) and a database that holds tables but no ledger schema are refused in
one line (exit 1), unchanged.

On PostgreSQL, run it as the role that owns the schema, before the workers start (or
after upgrading the package, before the workers are upgraded): see
[postgresql.md](postgresql.md#roles).

`--json` prints one [migration](#migration) object.

{shape("migration")}""",
    "path": f"""\
Prints the path of the database file, `ledger.sqlite3` in the store directory (see
[Which store](#which-store)), without opening it: it creates nothing and works when
there is no store yet.

`--json` prints one [store path](#store-path) object.

{shape("store path")}""",
    "mcp-proxy": """\
Writes the store: one run per proxy process, one effect per `tools/call`. Needs the
MCP SDK (`pip install 'tool-ledger[mcp]'`); without it, it says so in one line and
exits 1. Standard input and output carry the client's MCP messages; standard error
carries one line per run started or recovered and per call refused. It exits with the
server's status (128 + the signal's number if a signal killed it). How to put it in a
client's configuration, what it records and what it answers itself are in
[mcp.md](mcp.md).

```sh
ledger mcp-proxy --name files --kind send_mail=irreversible -- python -m my_server
```
""",
    "sql": """\
Reads the store. Replaces itself with the stock `sqlite3` shell, opened on the
database with `-safe -readonly -nofollow` and `mode=ro`, so that no statement can change
the store, `.open`, `ATTACH`, `.shell` and `writefile()` are refused, and a symlinked
database is not followed; the tables, views and recipes for an incident are in
[forensics.md](forensics.md). Only when you cannot write the store's directory and its
`-wal` is missing or empty does it open the database `immutable` instead, and it says
so on standard error: quit such a session before workers write to the store again. A
store owned by another user is copied into a private directory first, the shell runs on
the copy (later writes do not reach it), and the copy is removed when the shell exits.

Every argument goes to `sqlite3` after the database, in order: options
(`-box`, `-json`, `-separator ,`) and then SQL statements or dot-commands.

```sh
ledger sql                     # an interactive shell on the default store
ledger sql -box "SELECT run_id, effect_id, verdict FROM effect_status"
```

It needs the `sqlite3` program (Debian and Ubuntu: `apt install sqlite3`).
""",
    "demo": """\
Writes to the store: a new run. It starts a scripted agent worker that writes files
into a temporary sandbox, one claimed effect at a time, kills it with SIGKILL in the
middle of one write, and starts it again on the same run: the worker loads the log,
recovers the interrupted claim, observes every file and finishes. Then it prints each
effect's execution, impact and verdict, and the `sqlite3` command that shows the same
table from the `effect_status` view. With `--report FILE.html` it then writes the run's
page (see [report](#ledger-report)) and prints its path last. Without `--store` the run
goes to the default store; `make demo` uses `.demo/store` and writes
`.demo/report.html`. Exits 0 when the demo went as scripted, else 1.
""",
    "bench": """\
Writes only in a scratch directory, `ledger-bench-*`, that it creates in DIR and removes
afterwards; it never touches a store. Here `--store` names where to measure, not a
store: DIR must exist and be writable, and a DIR that is missing, a file or not
writable is refused with exit 1. Without `--store` it is the directory that holds the
default store (see [Which store](#which-store)), or its nearest existing ancestor: the
disk the claims of workers go to. A full run takes a few minutes; `--quick` measures
less, on a smaller run and store, in under half a minute. Progress lines go to
standard error only when it is a terminal.

Every figure comes from one run. The latency cases run interleaved, a chunk of each
per round in rotating order, so that noise from the rest of the machine falls on all
alike; before that, every SQLite database is written until its WAL has been
checkpointed once, so that all measure the steady state.

| case | what is timed |
| --- | --- |
| `raw` | stdlib `sqlite3`, WAL, `synchronous=FULL`: one claim-shaped row per transaction |
| `jsonl` | a claim's JSON line appended to a file opened `O_APPEND`, then `fsync` |
| `claim` | `EffectLog.claim` with one resource and one postcondition |
| `claim_outcome` | a claim and its outcome |
| `claim_many8` | `claim_many` of 8 claims; `per_claim_p50_us` is the median over 8 |
| `threads1`, `threads8` | 1 or 8 threads started together, each with its own log; claims/s |
| `threads8_shared` | 8 threads started together, all sharing one log; claims/s |
| `processes4` | 4 processes started together, one store; claims/s, `errors`, `max_wait_s` |
| `raw_off`, `cpu_off` | `raw` and `claim` with `synchronous=OFF`: the cost without the disk |
| `sql`, `sql_off` | a claim's SQL alone (FULL, OFF): its row made beforehand, then inserted |
| `mcp_direct`, `mcp_call` | a `tools/call` to a tiny stdio server, direct and via `mcp-proxy` |
| `assess_*` | `log.assess` on a loaded run of 1k and of 100k records (10k with `--quick`) |
| `recover_*` | `recover_interrupted` of 100 claims on those loaded runs |
| `status_*` | every `effect_status` row of those runs, in SQL; `claims` is how many rows |
| `recovery_*` | `load` + `recover_interrupted`, a 1k run in stores of 10k and 1m (quick: 100k) |

The runs and stores of the scale cases are built with `synchronous=OFF` to save time,
and the build times are printed but not counted; every measurement on them runs with
`synchronous=FULL`. `sql` and `sql_off` time what `claim` and `cpu_off` hand SQLite and
nothing else: each claim's row is made beforehand by the library's own code (validated,
encoded, chained), and a stdlib `sqlite3` connection set up as the store's writers are
runs `BEGIN IMMEDIATE`, the schema check, the insert (its guards and `scope_index` row)
and `COMMIT`. The ratios, with their targets, first those the code controls:
`cpu_off_vs_sql_off` (the library's work around the SQL: `cpu_off` p50 / `sql_off` p50,
at most 1.5), `sql_off_vs_raw_off` (the schema's SQL over a raw insert, at most 3),
`cpu_off_vs_raw_off` (at most 4.5), `effect_vs_claim_outcome` (`log.effect` over a claim
and its outcome, at most 1.15), `claim_many8_vs_claim` (p50 per claim in a batch of 8 /
claim p50, at most 0.18), `threads8_shared_vs_single` (claims/s of `threads8_shared` /
`threads1`, at least 3; the three thread cases run in turn, in the same rounds),
`mcp_call_vs_claim_outcome` (a call through the proxy over a claim and its outcome, at
most 1.3; only when the MCP SDK is installed), `claim_vs_raw` (claim p50 / raw p50, at
most 2); `processes4` must have no error and a p99 of at most 5 ms; then
`assess_100k_vs_1k`, `recovery_1m_vs_10k` and `status_100k_vs_1k` (per claim), each at
most 1.5. After them, without a target, come `claim_vs_jsonl` (p50s),
`threads8_vs_single` (claims/s, a log per thread), `sql_vs_raw` (p50s: the part of
`claim_vs_raw` that the schema's SQL costs by itself, which no Python around it can take
away) and `mcp_call_vs_direct` (p50s). Last, the earlier targets: `claim_vs_raw` against
1.5, `claim_vs_jsonl` against 1.1 and `cpu_off_vs_raw_off` against 4, each met or
missed. Missed targets are reported, not an error: the exit status is 0.

`--json` prints one object: `quick`, `store`, `seconds`, `machine` (`cpus`,
`platform`, `python`, `sqlite`), `notes` (strings), `cases` (by name: `what`, `n`,
`p50_us`, `p99_us`, `per_s`, and `records` for the scale cases), `builds` (`name`,
`records`, `seconds`), `ratios`, `targets` and `met` (the eleven ratios, ten without the
MCP SDK, in the order above), `extra_ratios` (`claim_vs_jsonl`, `threads8_vs_single`,
`sql_vs_raw`, `mcp_call_vs_direct`), `earlier_targets` (by name: `value`, `target`,
`met`) and `processes4` (`claims_per_s`,
`errors`, `max_wait_s`, `p99_us`, `target`, `met`). The figures are this machine's: no
two runs print the same.

`--reads` measures the reading commands instead, each run as its own `ledger` process
(stdout discarded) on stores of one run: of 1 effect, of 1,000 and of 100,000 (10,000
with `--quick`). The cases are `status`, `status_unresolved`, `runs`, `show` and
`report` (`report -o` a page in the scratch directory), each followed by its run's size
(`status_1`, `status_1k`, `status_100k`, ...), with the median wall time and the peak
memory of the process. Their ratios, `status_100k_vs_1k` and so on, are the large run's
time per effect over the small run's, each held to at most 1.5; beside them, without a
target, the same beyond the command's time on one effect. Then `ledger --version`
against `python -c pass`. A command still running after 300 s (120 s with `--quick`)
is stopped and reported so, without a ratio. It takes about ten minutes, and only on a
directory (not a PostgreSQL URL). With `--json`: `reads` (true), `quick`, `store`,
`seconds`, `machine`, `startup` (`ledger_version_s`, `python_pass_s`, `ratio`, `n`),
`cases` (by name: `command`, `effects`, `n`, `median_s`, `max_rss_mb`, `error`),
`per_effect_us` (by command, in µs: the small and the large run's, then each beyond
the fixed cost), `ratios`, `net_ratios`, `target`, `met`, `builds` and `notes`.
""",
}
