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

Names: Message, MessageType, Context, WorkflowNode, ToolRegistry, AgentNode, EnsembleNode
(majority_vote / weighted_vote / consensus), DebateNode, ReflectionNode, RouterNode
(+ create_keyword_router), Workflow, ConditionalWorkflow, LoopWorkflow, AgentGraph
(+ create_simple_chain). A feature we do not implement raises `Unsupported` with one line naming it.
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


STRATEGIES = ("majority_vote", "weighted_vote", "consensus")


class EnsembleNode(WorkflowNode):
    def __init__(self, name, agents, strategy="majority_vote", consensus_agent=None, weights=None, **kwargs):
        super().__init__(name, **kwargs)
        self.agents, self.strategy, self.consensus_agent = list(agents), str(strategy), consensus_agent
        self.weights = list(weights) if weights is not None else [1.0] * len(self.agents)
        if len(self.weights) != len(self.agents):
            raise ValueError("Number of weights must match number of agents")
        if self.strategy not in STRATEGIES:
            raise Unsupported(f"workflow: EnsembleNode strategy {self.strategy!r} (supported: "
                              f"{', '.join(STRATEGIES)})")
        if self.strategy == "consensus" and consensus_agent is None:
            raise ValueError("consensus strategy requires a consensus_agent")

    def _judge(self, context, responses, names):
        listing = "\n\n".join(f"--- Solution {i + 1} ({n}) ---\n{r}" for i, (n, r) in
                              enumerate(zip(names, responses)))
        prompt = (f"**Original Question:**\n{_question(context)}\n\n**Multiple Solutions:**\n\n{listing}\n\n"
                  "Review each solution carefully. Check the reasoning and calculations. Select the best "
                  "answer or synthesize a corrected answer. Your final answer MUST be in \\boxed{} format.")
        return _text(self.consensus_agent(_fresh(context, prompt)).content)

    def _vote(self, context, responses, weights, names):
        votes = [(r, _normal(b), w) for r, b, w in
                 ((r, boxed(r), w) for r, w in zip(responses, weights)) if b is not None]
        if not votes:
            return responses[weights.index(max(weights))]
        tally = {}
        for _, norm, w in votes:
            tally[norm] = tally.get(norm, 0.0) + w
        if self.strategy == "majority_vote" and len(tally) > 1 and self.consensus_agent is not None:
            return self._judge(context, responses, names)
        best = max(tally, key=lambda k: tally[k])  # first seen wins ties (dicts keep order)
        return next(r for r, norm, _ in votes if norm == best)

    def process(self, context):
        results = _run_all(self.agents, [context.copy() for _ in self.agents])
        kept = [(a, r) for a, r in zip(self.agents, results) if r.message_type != MessageType.ERROR]
        if not kept:
            return Message({"error": "All agents failed"}, MessageType.ERROR)
        names = [getattr(a, "name", "agent") for a, _ in kept]
        responses = [_text(r.content) for _, r in kept]
        weights = [self.weights[self.agents.index(a)] for a, _ in kept]
        if self.strategy == "consensus":
            final = self._judge(context, responses, names)
        else:
            final = self._vote(context, responses,
                               weights if self.strategy == "weighted_vote" else [1.0] * len(kept), names)
        return Message(final, MessageType.AGENT_RESPONSE, {"strategy": self.strategy,
                                                            "num_agents": len(self.agents),
                                                            "all_responses": responses})


class DebateNode(WorkflowNode):
    def __init__(self, name, debaters, judge=None, num_rounds=2, **kwargs):
        super().__init__(name, **kwargs)
        self.debaters, self.num_rounds = list(debaters), max(1, int(num_rounds))
        self.judge = judge or self.debaters[0]

    def process(self, context):
        question = _text(context.get_latest_message().content)
        history = []
        for r in range(min(self.num_rounds, _dsl()._runtime().limits["max_loop_iters"])):
            prompt = question
            if r:
                lines = ["Previous debate rounds:\n"]
                for k, answers in enumerate(history):
                    lines.append(f"=== Round {k + 1} ===")
                    lines += [f"Agent {i + 1} ({d.name}):\n{_compact(a)}\n"
                              for i, (d, a) in enumerate(zip(self.debaters, answers))]
                prompt = (f"Original question: {question}\n\n" + "\n".join(lines) + "\nBased on the "
                          "discussion above, please provide your refined answer. You may critique other "
                          "responses and improve your own.")
            results = _run_all(self.debaters, [_fresh(context, prompt) for _ in self.debaters])
            history.append([f"[Error: {m.content}]" if m.message_type == MessageType.ERROR
                            else _text(m.content) for m in results])
        listing = "\n\n".join(f"Response {i + 1} from {d.name}:\n{_compact(a)}"
                              for i, (d, a) in enumerate(zip(self.debaters, history[-1])))
        verdict = self.judge(_fresh(context, (
            f"Original question: {question}\n\nAfter {len(history)} rounds of debate, here are the final "
            f"responses:\n\n{listing}\n\nPlease select the best response or synthesize a better answer "
            "based on the debate. Provide your final answer.")))
        return Message(verdict.content, MessageType.AGENT_RESPONSE,
                       {"num_rounds": len(history), "debate_history": history})


def _similarity(a, b):
    ga = {a[i:i + 3] for i in range(len(a) - 2)}
    gb = {b[i:i + 3] for i in range(len(b) - 2)}
    return len(ga & gb) / len(ga | gb) if ga and gb else 0.0


class ReflectionNode(WorkflowNode):
    def __init__(self, name, agent, num_iterations=2, reflection_prompt=None, critic_agent=None,
                 refinement_prompt=None, include_history=False, **kwargs):
        super().__init__(name, **kwargs)
        if include_history:
            raise Unsupported("workflow: ReflectionNode(include_history=True) is not supported here")
        self.agent, self.num_iterations = agent, max(0, int(num_iterations))
        self.critic_agent = critic_agent if critic_agent is not None else agent
        self.reflection_prompt = reflection_prompt or (
            "You are a critical reviewer. Analyze the following response to a question.\n\n"
            "Original question: {question}\n\nResponse to review:\n{response}\n\n"
            "Identify any errors, check that the response is complete, and suggest specific "
            "improvements. End with your verdict: CORRECT or INCORRECT.")
        self.refinement_prompt = refinement_prompt or (
            "Original question: {question}\n\nYour previous response:\n{response}\n\n"
            "Critique from reviewer:\n{reflection}\n\nBased on this critique, provide an improved response.")

    def process(self, context):
        question = _question(context)
        first = self.agent(_fresh(context, question))
        if first.message_type == MessageType.ERROR:
            return first
        current = _text(first.content)
        rounds = min(self.num_iterations, _dsl()._runtime().limits["max_loop_iters"])
        for _ in range(rounds):
            critique = self.critic_agent(_fresh(context, self.reflection_prompt.format(
                question=question, response=_compact(current))))
            review = _text(critique.content)
            upper = review.upper()
            if "VERDICT: CORRECT" in upper or upper.strip().endswith("CORRECT") and \
                    not upper.strip().endswith("INCORRECT"):
                break
            refined = self.agent(_fresh(context, self.refinement_prompt.format(
                question=question, response=_compact(current), reflection=_compact(review, 1500))))
            if refined.message_type == MessageType.ERROR:
                break
            new = _text(refined.content)
            if _similarity(current, new) > 0.75:
                current = new if "\\boxed{" in new else current
                break
            current = new
        return Message(current, MessageType.AGENT_RESPONSE, {"generator_agent": self.agent.name,
                                                              "critic_agent": self.critic_agent.name})


class RouterNode(WorkflowNode):
    def __init__(self, name, routes, routing_func, default_route="default", **kwargs):
        super().__init__(name, **kwargs)
        self.routes, self.routing_func, self.default_route = dict(routes), routing_func, default_route
        if default_route not in self.routes:
            raise ValueError(f"Default route '{default_route}' not found in routes")

    def process(self, context):
        try:
            route = self.routing_func(context)
        except Exception:  # noqa: BLE001 - documented: a failing routing function takes the default
            route = self.default_route
        if route not in self.routes:
            route = self.default_route
        result = self.routes[route](context)
        result.metadata.update(routed_from=self.name, route_taken=route)
        return result


def create_keyword_router(name, keyword_routes, default_node, case_sensitive=False):
    def routing_func(context):
        latest = context.get_latest_message()
        text = _text(latest.content) if latest else ""
        text = text if case_sensitive else text.lower()
        return next((k for k in keyword_routes if (k if case_sensitive else k.lower()) in text), "default")
    return RouterNode(name, {**keyword_routes, "default": default_node}, routing_func, "default")


def _start(input_message, initial_state):
    context = Context()
    context.state = dict(initial_state or {})
    context.add_message(Message(input_message, MessageType.USER_INPUT))
    return context


def _finish(result):
    RUNS.append(result)
    return result


class Workflow:
    def __init__(self, name="workflow", ai_client=None, tokenizer=None, server_address=None,
                 ppo_trainer_config=None, enable_thinking=False):
        if ai_client is not None:
            raise Unsupported("workflow: Workflow(ai_client=...) is not supported here (every node is "
                              "answered by the executor policy)")
        self.name, self.nodes, self.logger = str(name), [], _QuietLogger()

    def add_node(self, node):
        self.nodes.append(node)
        return self

    def add_nodes(self, nodes):
        self.nodes.extend(nodes)
        return self

    def _steps(self, context):
        for node in self.nodes:
            result = node(context)
            if result.message_type == MessageType.ERROR:
                return result
        return None

    def run_with_context(self, context):
        return _finish(self._steps(context) or context.get_latest_message())

    def run(self, input_message, initial_state=None):
        context = _start(input_message, initial_state)
        context.state["workflow"] = self
        return self.run_with_context(context)


class ConditionalWorkflow(Workflow):
    def __init__(self, name="conditional_workflow"):
        super().__init__(name)
        self.conditions = []

    def add_node(self, node, condition=None):
        self.nodes.append(node)
        self.conditions.append(condition)
        return self

    def _steps(self, context):
        for node, condition in zip(self.nodes, self.conditions):
            if condition is not None:
                try:
                    if not condition(context):
                        continue
                except Exception:  # noqa: BLE001 - documented: a failing condition skips the node
                    continue
            result = node(context)
            if result.message_type == MessageType.ERROR:
                return result
        return None


class LoopWorkflow(Workflow):
    def __init__(self, name="loop_workflow", max_iterations=10):
        super().__init__(name)
        self.max_iterations, self.loop_condition = max(1, int(max_iterations)), None

    def set_loop_condition(self, condition):
        self.loop_condition = condition
        return self

    def _steps(self, context):
        if self.loop_condition is None:
            raise ValueError("Loop condition must be set before running LoopWorkflow")
        for _ in range(min(self.max_iterations, _dsl()._runtime().limits["max_loop_iters"])):
            error = Workflow._steps(self, context)
            if error is not None:
                return error
            try:
                if not self.loop_condition(context):
                    break
            except Exception:  # noqa: BLE001 - documented: a failing loop condition ends the loop
                break
        return None


class AgentGraph:
    def __init__(self, name="agent_graph", max_steps=50):
        self.name, self.max_steps = str(name), max(1, int(max_steps))
        self.nodes, self.edges, self.routers = {}, [], {}
        self.entry_point, self.finish_points = None, set()

    def add_node(self, name, node):
        self.nodes[name] = node
        return self

    def add_edge(self, source, target, condition=None):
        for n in (source, target):
            if n not in self.nodes:
                raise ValueError(f"Node '{n}' not found")
        self.edges.append((source, target, condition))
        return self

    def add_conditional_edges(self, source, routing_func):
        if source not in self.nodes:
            raise ValueError(f"Source node '{source}' not found")
        self.routers[source] = routing_func
        return self

    def set_entry_point(self, node_name):
        if node_name not in self.nodes:
            raise ValueError(f"Node '{node_name}' not found")
        self.entry_point = node_name
        return self

    def set_finish_point(self, node_name):
        if node_name not in self.nodes:
            raise ValueError(f"Node '{node_name}' not found")
        self.finish_points.add(node_name)
        return self

    def _next(self, current, context):
        if current in self.routers:
            try:
                target = self.routers[current](context)
            except Exception:  # noqa: BLE001 - documented: a failing router ends the run
                return None
            return target if target in self.nodes else None
        for source, target, condition in self.edges:
            if source == current and (condition is None or condition(context)):
                return target
        return None

    def run(self, input_message, initial_state=None):
        if self.entry_point is None:
            raise ValueError("Entry point not set. Call set_entry_point() first.")
        if not self.finish_points:
            raise ValueError("No finish points set. Call set_finish_point() at least once.")
        context = _start(input_message, initial_state)
        current = self.entry_point
        for _ in range(self.max_steps):
            result = self.nodes[current](context)
            if result.message_type == MessageType.ERROR or current in self.finish_points:
                return _finish(result)
            current = self._next(current, context)
            if current is None:
                return _finish(result)
        return _finish(context.get_latest_message())


def create_simple_chain(*nodes):
    graph = AgentGraph()
    for name, node in nodes:
        graph.add_node(name, node)
    for (a, _), (b, _) in zip(nodes, nodes[1:]):
        graph.add_edge(a, b)
    if nodes:
        graph.set_entry_point(nodes[0][0]).set_finish_point(nodes[-1][0])
    return graph


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
