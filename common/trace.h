/* common/trace.h — load-step timestamps for measuring where load time goes
 * (README, "Processes and sandbox"; bench/privsep_trace.py).
 *
 * With MLXR_TRACE=1 in the environment (the broker's children inherit it),
 * trace_mark() writes one line to stderr:
 *     mlxr-trace <CLOCK_MONOTONIC in ms> <step>
 * Steps name their process ("broker: ...", "worker: ...", "inproc: ...").
 * The clock is shared by every process on the machine, so lines from the
 * broker and the worker can be merged. Without MLXR_TRACE nothing is
 * written; each call then costs one branch. Never carries prompt text. */
#ifndef MLXR_TRACE_H
#define MLXR_TRACE_H

void trace_mark(const char *step);

#endif
