"""The program that runs inside the sandbox: load the design, replay, report (stdlib only).

The executor builds `mas.py` = a bootstrap that installs the DSL source as the module
`pettingllms.mas.dsl`, this file's source, and the design source as a string; the sandbox runs
it with one JSON message on stdin:

    {"question": str, "answers": {key: text}, "tools": {key: ToolResult fields},
     "limits": {...DSL limits}, "max_log_chars": int, "max_answer_chars": int,
     "format": "pettingllms" | "workflow", "task": "math" | "code"}

Format `workflow` (the released model's, pettingllms.mas.workflow_api, shipped as `api`): the
design is a script that gets `question` as a global, imports `workflow`, and prints its answer
after a `FINAL ANSWER:` line (else its last workflow run's content is the answer).

and it writes, after the line `RESULT_MARK`, one JSON object to the real stdout:

    {"status": "done" | "pending" | "error", "answer": str | None, "error": str | None,
     "requests": [new calls, see dsl.ReplayRuntime], "seen": [{key, digest}], "log": str}

The design's own prints and errors go to a capped buffer (the `log`), never to the channel.
"""
import builtins
import json
import sys
import traceback

RESULT_MARK = "@@PETTINGLLMS-MAS-RESULT@@"
_BLOCKED_BUILTINS = ("open", "eval", "exec", "compile", "input", "breakpoint", "globals", "locals",
                     "vars", "help", "exit", "quit", "memoryview")


class _CappedLog:
    def __init__(self, cap):
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    def write(self, text):
        text = str(text)
        room = self.cap - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(len(text), room)
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def flush(self):
        pass

    def value(self):
        tail = f"\n[... {self.dropped} more characters of output dropped]" if self.dropped else ""
        return "".join(self.parts) + tail


def _safe_builtins(dsl, api=None):
    real_import = builtins.__import__
    own = set(api.SUBMODULES) if api is not None else {dsl.DSL_MODULE}
    allowed = set(dsl.ALLOWED_MODULES) | own

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name not in allowed:
            raise ImportError(f"designs may import only {sorted(own)[0]} and "
                              f"{', '.join(dsl.ALLOWED_MODULES)}; not {name!r}")
        return real_import(name, globals, locals, fromlist, level)

    safe = {k: v for k, v in vars(builtins).items() if k not in _BLOCKED_BUILTINS}
    safe["__import__"] = guarded_import
    return safe


def _design_traceback(exc):
    """The traceback lines that point into the design (not the driver or the DSL internals)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "mas_design.py"]
    lines = [f"  mas_design.py line {f.lineno}: {(f.line or '').strip()}" for f in frames[-5:]]
    head = f"{type(exc).__name__}: {exc}"
    return "\n".join([head] + lines)


def _run_workflow_format(api, code, builtins_, question):
    """A released-format design: run the script, its answer is what it printed (api.final_answer)."""
    namespace = {"__name__": "__main__", "__builtins__": builtins_, "question": question}
    exec(code, namespace)
    last = api.RUNS[-1] if api.RUNS else None
    if last is not None and last.message_type == api.MessageType.ERROR:
        raise RuntimeError(f"node {last.sender} failed: {api._text(last.content)[:500]}")
    answer = api.final_answer(sys.stdout.value())
    if answer is None:
        raise TypeError("the design printed no FINAL ANSWER and ran no workflow")
    return answer


def main(dsl, design_source, api=None):
    message = json.loads(sys.stdin.read() or "{}")
    workflow_format = message.get("format") == "workflow"
    if workflow_format and api is None:
        raise SystemExit("format 'workflow' needs the workflow API in the program")
    channel = sys.stdout
    log = _CappedLog(int(message.get("max_log_chars", 20000)))
    sys.stdout = sys.stderr = log
    runtime = dsl.ReplayRuntime(message.get("answers", {}), message.get("tools", {}),
                                message.get("limits"))
    dsl.set_runtime(runtime)
    result = {"status": "error", "answer": None, "error": None}
    try:
        code = compile(design_source, "mas_design.py", "exec")
        if workflow_format:
            api.SETTINGS.update(task=str(message.get("task", "math")), dsl=dsl)
            answer = _run_workflow_format(api, code, _safe_builtins(dsl, api),
                                          str(message.get("question", "")))
        else:
            namespace = {"__name__": "mas_design", "__builtins__": _safe_builtins(dsl)}
            exec(code, namespace)
            workflow = namespace.get("workflow")
            if not callable(workflow):
                raise TypeError("the design defines no `workflow` function or node")
            answer = workflow(str(message.get("question", "")))
        if answer is None:
            raise TypeError("workflow returned None (it must return the final answer as text)")
        result = {"status": "done", "answer": str(answer)[:int(message.get("max_answer_chars", 4000))],
                  "error": None}
    except dsl._Pending:
        pass
    except dsl.BudgetExceeded as e:
        result["error"] = str(e)
    except SyntaxError as e:
        result["error"] = f"syntax: line {e.lineno}: {e.msg}"
    except BaseException as e:  # noqa: BLE001 - any failure of the design is reported, not raised
        if api is not None and isinstance(e, api.Unsupported):
            result["error"] = f"unsupported: {e}"  # one line naming the feature
        else:
            result["error"] = "design: " + _design_traceback(e)
    if runtime.requests and result["error"] is None:
        result = {"status": "pending", "answer": None, "error": None}  # even if the design hid it
    result.update(requests=runtime.requests, seen=runtime.seen, log=log.value())
    channel.write("\n" + RESULT_MARK + json.dumps(result) + "\n")
    channel.flush()
