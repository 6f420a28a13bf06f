// The walk of a statement tree (TreeShape.h).
#include "loops/TreeShape.h"

#include <cstring>
#include <type_traits>

namespace frank::loops {

TreeWalk::TreeWalk(const Program &program, bool withShape, Constants constants,
                   const std::vector<std::string> *holeNames)
    : program_(program), withShape_(withShape), constants_(constants), holeNames_(holeNames) {}

// The shape is bytes: a tag opens each part, and fields have fixed sizes (a name's text comes
// after its length), so two trees have the same shape only if they have the same parts.
template <class... Fields> void TreeWalk::write(char tag, Fields... fields) {
  if (!withShape_)
    return;
  shape.push_back(tag);
  (raw(fields), ...);
}

template <class Field> void TreeWalk::raw(Field field) {
  if constexpr (std::is_same_v<Field, std::string_view>) {
    raw(int64_t(field.size()));
    shape.append(field);
  } else {
    char bytes[sizeof(Field)];
    std::memcpy(bytes, &field, sizeof(Field));
    shape.append(bytes, sizeof(Field));
  }
}

std::vector<Stmt> TreeWalk::stmts(const std::vector<Stmt> &list) {
  write('{');
  std::vector<Stmt> out;
  for (const Stmt &s : list) {
    Stmt rebuilt = stmt(s);
    if (holeNames_)
      out.push_back(std::move(rebuilt));
  }
  write('}');
  return out;
}

Stmt TreeWalk::stmt(const Stmt &s) {
  write('[', int(s->kind), int(s->forKind), int(s->type), s->lanes);
  if (!s->name.empty())
    name(s->name);
  if (!s->chunkFirst.empty()) {
    write('f');
    name(s->chunkFirst);
  }
  if (s->kind == StmtKind::Store || s->kind == StmtKind::Prefetch)
    buffer(s->buffer);
  else
    write('c', s->buffer); // a check's id
  const bool vectorized = s->kind == StmtKind::For && s->forKind == ForKind::Vectorize;
  Expr value = expr(s->value, vectorized), index = expr(s->index), bound = expr(s->bound);
  std::vector<Stmt> body = stmts(s->body), elseBody = stmts(s->elseBody);
  write(']');
  if (!holeNames_)
    return s;
  auto copy = std::make_shared<StmtNode>(*s);
  copy->value = std::move(value);
  copy->index = std::move(index);
  copy->bound = std::move(bound);
  copy->body = std::move(body);
  copy->elseBody = std::move(elseBody);
  return copy;
}

Expr TreeWalk::expr(const Expr &e, bool vectorizedExtent) {
  if (!e) {
    write('-');
    return e;
  }
  if (constants_ == Constants::Holes && e->kind == ExprKind::IntConst &&
      e->type == ElemKind::Index && e->lanes == 1) {
    write('K');
    const size_t at = holes.size();
    holes.push_back(e->intValue);
    holeIsVectorizedExtent.push_back(vectorizedExtent);
    if (holeNames_ && !(*holeNames_)[at].empty())
      return var((*holeNames_)[at], ElemKind::Index);
    return e;
  }
  write('(', int(e->kind), int(e->type), e->lanes, int(e->op), e->reassoc);
  if (e->kind == ExprKind::Var)
    name(e->name);
  else if (e->kind == ExprKind::Load)
    buffer(static_cast<int>(e->intValue));
  else
    write('v', e->intValue, e->floatValue, std::string_view(e->name));
  for (int pick : e->picks)
    write('p', pick);
  if (!holeNames_) { // nothing to rebuild
    for (const Expr &a : e->args)
      expr(a);
    write(')');
    return e;
  }
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr &a : e->args) {
    args.push_back(expr(a));
    changed |= args.back() != a;
  }
  write(')');
  if (!changed)
    return e;
  return withArgs(e, std::move(args));
}

void TreeWalk::name(const std::string &n) {
  auto [it, fresh] = nameIds_.try_emplace(n, names.size()); // no node made for a name seen
  if (fresh)
    names.push_back(n);
  write('n', it->second);
}

void TreeWalk::buffer(int b) {
  auto [it, fresh] = bufferIds_.try_emplace(b, buffers.size());
  if (fresh)
    buffers.push_back(b);
  const Buffer &info = program_.buffers[size_t(b)];
  write('b', it->second, int(info.elem), info.role == BufferRole::Input);
}

} // namespace frank::loops
