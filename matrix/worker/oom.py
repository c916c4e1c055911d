"""Whether the kernel's out-of-memory killer acted while a process ran: a SIGKILL trtmatrix did not
send is most often it, and "killed by SIGKILL" alone sent a stranger looking (explain of a large
detector in FP16 held 17.4 GB of a 23 GB machine). /proc/vmstat's oom_kill counts every such kill on
the machine (Linux 4.13+), containers included: a rise says one happened meanwhile, not to whom.
Python 3.8 syntax: it runs inside old containers with the worker.
"""


def oom_kills():
    """The machine's count of out-of-memory kills so far, or None where the kernel does not say."""
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def oom_note(before):
    """'; the kernel's out-of-memory killer acted meanwhile: most likely out of memory' where the count
    rose since `before`, else ''."""
    now = oom_kills()
    if before is None or now is None or now <= before:
        return ""
    return "; the kernel's out-of-memory killer acted meanwhile (/proc/vmstat oom_kill): most likely out of memory"
