"""--list-hosts, --list-tasks and --list-tags: what a run would work on, in ansible-playbook's words and shape
(measured with ansible-playbook 2.19), from the inventory and the playbook alone: nothing is contacted.

    playbook: site.yml

      play #1 (all): Converge	TAGS: []
        pattern: ['all']
        hosts (2):
          gpu01
          gpu02
        tasks:
          nouveau-blacklist	TAGS: [driver]
          TASK TAGS: [driver]

provision's playbook is one play over every host the inventory and --limit select (its pattern is `all`, as
ansible-playbook prints the play's own pattern, not --limit's); the ad-hoc commands print `ansible HOSTS
--list-hosts`'s shape instead. Hosts are listed in the order the run takes them (Ansible's is a set's)."""

from __future__ import annotations

from pathlib import Path

from provision.core.plan import Task


def host_lines(hosts: list[str], indent: str = "  ") -> list[str]:
    """`ansible all --list-hosts`: the count, then one host a line."""
    return [f"{indent}hosts ({len(hosts)}):", *(f"{indent}  {name}" for name in hosts)]


def own_tags(task: Task) -> list[str]:
    """A task's tags as its playbook entry gives them: every task's name is a tag too, shown as its name."""
    return sorted(task.tags - {task.name})


def play_lines(playbook: Path, hosts: list[str] | None, tasks: list[Task], list_tasks: bool,
               list_tags: bool) -> list[str]:
    """ansible-playbook --list-hosts (hosts not None), --list-tasks, --list-tags, any of them together; `tasks`
    are those --tags and --skip-tags select, as ansible-playbook lists them."""
    lines = ["", f"playbook: {playbook}", "", f"  play #1 (all): {playbook.stem}\tTAGS: []"]
    if hosts is not None:
        lines += ["    pattern: ['all']", *host_lines(hosts, "    ")]
    if list_tasks:
        lines += ["    tasks:", *(f"      {task.name}\tTAGS: [{', '.join(own_tags(task))}]" for task in tasks)]
    if list_tags:
        every = sorted(set().union(*(own_tags(task) for task in tasks)))
        lines.append(f"      TASK TAGS: [{', '.join(every)}]")
    return lines
