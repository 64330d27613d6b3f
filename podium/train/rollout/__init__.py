"""One step's rollouts: whose they are, how they are generated, and what they carry.

    layout       the process rank (`Launch`) and this process's piece of each step's
                 rollouts (`Layout`, `pieces_of`); the launch checked against the recipe
    settings     `RolloutSettings`: the [grpo] and [recursion] keys a rollout reads, and the
                 rank, taken from the config once
    row          `Row` (one training question: its prompt, task item, sub-pool, budget),
                 `RolloutInfo` (what the reward needs of one completion beyond its text) and
                 `Rollouts` (a batch, handed to TRL as its rollout dictionary)
    grammars     the Conductor's workflow grammar per row (GBNF text and compiled by xgrammar)
    generate     completions for a batch: sampled by transformers under each row's grammar or
                 by vLLM (`vllm`), or greedy for the held-out evaluation
    explore      plan skeletons drawn for a share of each group; the text a drawn plan's
                 grammar fixes is written, not sampled
    constrained  TRL's `rollout_func` for single-round training under the grammar
    recursion    TRL's `rollout_func` for the recursion fine-tune (round 0, then round 1)

Everything TRL-specific (its trainer's attributes and private methods) is read through
`podium.train.grpo.TrlTrainer`, the one module that touches them. Importing this package
imports nothing else.
"""
