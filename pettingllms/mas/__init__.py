"""MetaAgent-X: a designer writes a multi-agent workflow per query, an executor runs it.

    dsl.py       the workflow DSL designs are written in (stdlib only; shipped into the sandbox)
    workflow_api.py, workflow_flows.py   the released MetaAgent-X `workflow` API on the DSL's runtime
                 (mas.design_format=workflow; shipped into the sandbox as the module `workflow`)
    checks.py    static DSL checks of a design (validity)
    driver.py    the program side of the sandbox channel (replay, report)
    executor.py  run_designs(): designs in the sandbox, node calls batched into one engine
    budgets.py   MasBudgets (nodes, calls, tokens, wall time)
    templates/   one documented design per pattern (SFT templates)
"""
