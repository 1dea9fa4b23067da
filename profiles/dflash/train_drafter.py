"""Train a DFlash speculative-decoding drafter (envlock example script)."""

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--out", default="/workspace/checkpoints/drafter")
    args = parser.parse_args()
    import torch  # imported late so `--help` works anywhere

    model = torch.compile(torch.nn.Linear(4096, 4096).cuda())
    print(json.dumps({"args": vars(args), "devices": torch.cuda.device_count()}))
    os.makedirs(args.out, exist_ok=True)
    torch.save({"model_state_dict": model.state_dict(), "args": args}, f"{args.out}/step0.pt")


if __name__ == "__main__":
    main()
