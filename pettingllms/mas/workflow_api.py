"""The released MetaAgent-X design format: the `workflow` package API, on top of our DSL runtime.

The released designer (Mercury7353/MetaAgent-X) writes programs like

    from workflow import AgentNode, Workflow, ToolRegistry
    from workflow.nodes import EnsembleNode
    solver = AgentNode(name="Solver", system_prompt="Solve it. Put the answer in \\\\boxed{}.",
                       tool_registry=ToolRegistry(), max_turns=1)
    workflow = Workflow(name="single")
    workflow.add_node(solver)
    print("FINAL ANSWER:")
    result = workflow.run(question)      # `question` is given to the design as a global
    print(result.content)

This module is our implementation of that API (from its documented names, signatures and
behaviour): every LLM call goes through the DSL runtime (`dsl._runtime().llm`, so the sandbox's
replay, batching, budgets and traces apply), tool code through `dsl.python_tool`, and the members
of an ensemble / the debaters of a round are answered in one batch (`dsl.parallel`). Like the DSL
it is stdlib-only: the executor ships its source into the sandbox as the module `workflow` (also
importable as workflow.nodes / workflow.core / workflow.graph / workflow.workflow).

Here: Message, MessageType, Context, WorkflowNode, ToolRegistry, AgentNode (and the shared state
the driver reads); the combining nodes and the workflows are in workflow_flows.py: EnsembleNode
(majority_vote / weighted_vote / consensus), DebateNode, ReflectionNode, RouterNode
(+ create_keyword_router), Workflow, ConditionalWorkflow, LoopWorkflow, AgentGraph
(+ create_simple_chain). The executor puts both into the one module `workflow`. A feature we do
not implement raises `Unsupported` with one line naming it.
"""
import json
import re

SUBMODULES = ("workflow", "workflow.nodes", "workflow.core", "workflow.graph", "workflow.workflow")
DELIVERY = {
    "math": ("\n\nAfter solving, output two things:\n1. Wrap the key reasoning steps you want to share "
             "with the next agent in <delivery>...</delivery> tags.\n2. State your final answer as: "
             "FINAL ANSWER: \\boxed{your_answer}"),
    "code": ("\n\nAfter solving, output two things:\n1. Wrap the key reasoning steps you want to share "
             "with the next agent in <delivery>...</delivery> tags.\n2. Wrap your complete solution "
             "code in <solution>...</solution> tags. Only include the final runnable code inside "
             "<solution>, no explanations."),
}
SETTINGS = {"task": "math", "dsl": None}  # set by the driver before the design runs
RUNS = []  # every Workflow/graph run's final Message, in order (the driver reads the last)


class Unsupported(BaseException):
    """A design used a part of the released API we do not implement (BaseException: a node's
    error handling must not turn it into an answer)."""


def _dsl():
    return SETTINGS["dsl"]


class _QuietLogger:
    def info(self, *a, **k):
        pass

    debug = warning = error = info


class MessageType:
    USER_INPUT = "user_input"
    AGENT_RESPONSE = "agent_response"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    INTERMEDIATE = "intermediate"
    FINAL_RESULT = "final_result"
    ERROR = "error"


class Message:
    def __init__(self, content, message_type=MessageType.AGENT_RESPONSE, metadata=None, sender=None,
                 recipient=None):
        self.content, self.message_type = content, message_type
        self.metadata, self.sender, self.recipient = dict(metadata or {}), sender, recipient

    def to_dict(self):
        return {"content": self.content, "type": self.message_type, "metadata": self.metadata,
                "sender": self.sender, "recipient": self.recipient}

    def __repr__(self):
        return f"Message({self.message_type}, {str(self.content)[:80]!r})"


class Context:
    def __init__(self):
        self.messages, self.state = [], {}

    def add_message(self, message):
        self.messages.append(message)

    def get_messages_by_type(self, message_type):
        return [m for m in self.messages if m.message_type == message_type]

    def get_latest_message(self, message_type=None):
        for m in reversed(self.messages):
            if message_type is None or m.message_type == message_type:
                return m
        return None

    def set_state(self, key, value):
        self.state[key] = value

    def get_state(self, key, default=None):
        return self.state.get(key, default)

    def copy(self):
        new = Context()
        new.messages, new.state = list(self.messages), dict(self.state)
        return new


def _text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return json.dumps(content, ensure_ascii=False)
    return str(content)


def _question(context):
    first = next((m for m in context.messages if m.message_type == MessageType.USER_INPUT), None)
    return _text(first.content) if first is not None else _text(getattr(context.get_latest_message(),
                                                                        "content", ""))


def _fresh(context, prompt):
    """A new context that shares the state and holds one user input."""
    new = Context()
    new.state = dict(context.state)
    new.add_message(Message(prompt, MessageType.USER_INPUT))
    return new


class WorkflowNode:
    def __init__(self, name, **kwargs):
        self.name, self.config = str(name), kwargs
        self.logger = _QuietLogger()
        self.node_id = f"{self.name}#{_dsl()._runtime().count_node()}"

    def process(self, context):
        raise NotImplementedError

    def __call__(self, context):
        try:
            result = self.process(context)
        except Exception as e:  # noqa: BLE001 - as documented: a node's error becomes an ERROR message
            result = Message({"error": str(e), "node": self.name}, MessageType.ERROR,
                             metadata={"exception_type": type(e).__name__})
        result.sender = self.name
        context.add_message(result)
        return result


class ToolRegistry:
    def __init__(self):
        self._tools = {}

    def register(self, name, func, description="", parameters=None):
        self._tools[str(name)] = {"function": func, "description": str(description),
                                  "parameters": parameters or {"type": "object", "properties": {}}}

    register_tool = register

    def get_tool(self, name):
        return self._tools.get(name)

    def list_tools(self):
        return list(self._tools)

    def get_tool_schemas(self):
        return [{"type": "function", "function": {"name": n, "description": t["description"],
                                                  "parameters": t["parameters"]}}
                for n, t in self._tools.items()]

    def call_tool(self, name, parameters):
        tool = self.get_tool(name)
        if tool is None:
            raise ValueError(f"Tool '{name}' not found")
        return tool["function"](**dict(parameters or {}))


def python_execute(code):
    """The built-in code tool: runs `code` in its own sandbox process (budgeted) -> its output."""
    r = _dsl().python_tool(code)
    if r.ok:
        return r.stdout
    return f"{r.stdout}\nError: {r.error or ''}\n{r.stderr[-1000:]}".strip()


_DELIVERY_TAG = re.compile(r"<delivery>(.*?)</delivery>", re.DOTALL)
_PY_BLOCK = re.compile(r"```python\s*\n(.*?)```", re.DOTALL)


def delivery(text):
    """What an agent hands on: its <delivery> block, else the text after FINAL ANSWER:, else its
    <solution> block; None if none."""
    m = _DELIVERY_TAG.search(text)
    if m:
        return m.group(1).strip()
    m = re.search(r"FINAL ANSWER:\s*(.*)", text)
    if m:
        return m.group(1).strip()
    m = re.search(r"<solution>(.*?)</solution>", text, re.DOTALL)
    return m.group(0).strip() if m else None


def _compact(text, cap=3000):
    text = _text(text).strip()
    if len(text) <= cap:
        return text
    d = delivery(text)
    if d:
        return d[:cap]
    return "...[earlier content omitted]...\n" + text[-cap:]


class AgentNode(WorkflowNode):
    def __init__(self, name, system_prompt, tool_registry=None, ai_client=None, max_turns=10,
                 enable_conversation_logging=True, **kwargs):
        super().__init__(name, **kwargs)
        if ai_client is not None:
            raise Unsupported("workflow: AgentNode(ai_client=...) is not supported here (every "
                              "node is answered by the executor policy)")
        self.system_prompt, self.max_turns = str(system_prompt), max(0, int(max_turns))
        self.tool_registry = tool_registry if tool_registry is not None else ToolRegistry()

    def build_messages(self, context):
        system = self.system_prompt
        if self.tool_registry.list_tools():
            system += (f"\n\nYou have access to the following tools: "
                       f"{json.dumps(self.tool_registry.get_tool_schemas(), indent=2)}.\n"
                       "When you need to call a tool, output it in the following format:\n"
                       '<tool_call>{\n  "name": "tool_name",\n  "arguments": {\n'
                       '    "argument_name": "argument_value"\n  }\n}</tool_call>\n'
                       "Make sure to include ALL required arguments in the tool call.\n")
        system += DELIVERY.get(SETTINGS["task"], DELIVERY["math"])
        question = _question(context)
        earlier = [m for m in context.messages if m.message_type == MessageType.AGENT_RESPONSE]
        if not earlier:
            return [{"role": "system", "content": system}, {"role": "user", "content": question}]
        parts = [f"**Original Question:**\n{question}\n", "**Previous Agents' Analysis:**\n"]
        for m in earlier:
            body = _text(m.content)
            summary = delivery(body)
            if summary is None:
                summary = body if len(body) <= 1200 else (body[:200] + "\n...(reasoning omitted)...\n"
                                                          + body[-800:])
            parts.append(f"[{m.sender or 'Agent'}]:\n{summary}\n")
        parts.append("Based on the original question and the analysis above, provide your own solution.")
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]

    def _llm(self, messages):
        return _dsl()._runtime().llm(self.node_id, self.name, messages)

    def _tool_turn(self, reply):
        """The user message answering a tool call in `reply`, or None when `reply` is final."""
        code = _PY_BLOCK.search(reply)
        if code:
            if self.tool_registry.get_tool("python_execute"):
                return str(self.tool_registry.call_tool("python_execute", {"code": code.group(1).strip()}))
            return python_execute(code.group(1).strip())
        if "<tool_call>" not in reply or "</tool_call>" not in reply:
            return None
        raw = reply.split("<tool_call>")[1].split("</tool_call>")[0].strip()
        if not raw:
            return ("Error: Empty tool call. Please provide a valid tool call with proper JSON format, "
                    "or provide your final answer without using tools.")
        try:
            call = json.loads(raw)
        except ValueError as e:
            return f"Error: Invalid JSON format in tool call.\nJSON error: {e}"
        name = call.get("name") if isinstance(call, dict) else None
        if not name:
            return "Error: Tool call is missing the 'name' field."
        params = call.get("parameters") or call.get("arguments") or {}
        try:
            return f"Tool '{name}' returned: {self.tool_registry.call_tool(name, params)}"
        except Exception as e:  # noqa: BLE001 - the agent sees the tool's error, as documented
            return f"Error executing tool: {e}"

    def process(self, context):
        messages = self.build_messages(context)
        for _ in range(self.max_turns + 1):
            reply = self._llm(messages)
            answer = self._tool_turn(reply)
            messages = messages + [{"role": "assistant", "content": reply}]
            if answer is None:
                return Message(reply, MessageType.AGENT_RESPONSE, {"agent_name": self.name})
            messages.append({"role": "user", "content": answer})
        messages.append({"role": "user", "content": (
            "Stop calling tools and produce your final response now. If your role is to provide the "
            "solution code, wrap it in <solution>...</solution> tags." if SETTINGS["task"] == "code"
            else "Please provide your final answer now without using any tools.")})
        return Message(self._llm(messages), MessageType.AGENT_RESPONSE, {"agent_name": self.name})


def _run_all(nodes, contexts):
    """Run node i on contexts[i]; the LLM calls of all of them are answered in one batch."""
    branches = [lambda task, ctx, n=n, c=c: n(c) for n, c in zip(nodes, contexts)]
    return _dsl().parallel(branches, "", None)


def boxed(text):
    text = _text(text)
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, j = 1, i + len("\\boxed{")
    start = j
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[start:j - 1].strip() if depth == 0 else None


def _normal(answer):
    s = answer.strip().strip("$ ")
    try:
        v = float(s)
        return str(int(v)) if v == int(v) else str(v)
    except (ValueError, OverflowError):
        pass
    m = re.match(r"\\frac\{([^{}]+)\}\{([^{}]+)\}$", s)
    if m:
        s = f"{m.group(1)}/{m.group(2)}"
    if "/" in s and "\\" not in s and s.count("/") == 1:
        try:
            a, b = (float(x) for x in s.split("/"))
            v = a / b
            return str(int(v)) if v == int(v) else str(v)
        except (ValueError, ZeroDivisionError):
            pass
    for junk in ("\\,", "\\;", "\\!", "\\left", "\\right", " "):
        s = s.replace(junk, "")
    return s


def _start(input_message, initial_state):
    context = Context()
    context.state = dict(initial_state or {})
    context.add_message(Message(input_message, MessageType.USER_INPUT))
    return context


def _finish(result):
    RUNS.append(result)
    return result


def final_answer(log_text):
    """The design's answer: what it printed after its last `FINAL ANSWER:` line (up to a line of
    ===), else the content of its last workflow run; None if neither."""
    lines = log_text.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip().rstrip(":").upper() == "FINAL ANSWER"]
    if marks:
        body = []
        for line in lines[marks[-1] + 1:]:
            if line.strip().startswith("====="):
                break
            body.append(line)
        text = "\n".join(body).strip()
        if text:
            return text
    if RUNS and RUNS[-1] is not None:
        return _text(RUNS[-1].content)
    return None
