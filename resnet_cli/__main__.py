"""`python -m resnet_cli` and the `resnet` script (also what torchrun launches)."""


def run() -> None:
    """Signal handling first, then everything slow: a signal during start-up is not lost."""
    from .training.signals import Interrupted, exit_stopped, install_early

    install_early()
    try:
        from .training import testhook

        testhook.phase("start")
        from .cli import main
    except Interrupted as exc:  # a signal while the commands were being imported
        exit_stopped(exc)
    main()


if __name__ == "__main__":  # not in a spawned worker, which imports this module as __mp_main__
    run()
