"""A model's weights as fairseq's BART checkpoints hold them (for the tests of fairseq ``model.pt`` files)."""
import torch


def fairseq_state(model) -> dict:
    """The model's weights named and laid out as fairseq's BARTModel.state_dict() (the inverse of
    transformers' convert_bart_original_pytorch_checkpoint_to_pytorch.py)."""
    sd = model.state_dict()
    out = {k[len("model."):]: v.clone() for k, v in sd.items() if k.startswith("model.") and k != "model.shared.weight"}
    out["decoder.output_projection.weight"] = sd["lm_head.weight"].clone()
    out["encoder.version"] = torch.tensor([3.0])
    out["decoder.version"] = torch.tensor([3.0])
    return out
