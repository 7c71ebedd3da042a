-- Argo CD health of an AgentSessionPolicy: its Valid condition (False lists every problem, e.g. a
-- pattern RE2 refuses). Argo CD runs this with gopher-lua (Lua 5.1).
local hs = {}

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the agentsession operator to check the policy"
  return hs
end

if status.observedGeneration ~= nil and obj.metadata ~= nil and obj.metadata.generation ~= nil
    and status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to check generation " .. obj.metadata.generation
  return hs
end

for _, c in ipairs(status.conditions) do
  if c.type == "Valid" then
    if c.status == "True" then
      hs.status = "Healthy"
      hs.message = "Valid; selects " .. tostring(status.matchedSessions or 0) .. " session(s)"
    else
      hs.status = "Degraded"
      hs.message = (c.reason or "InvalidSpec") .. ": " .. (c.message or "the policy is invalid")
    end
    return hs
  end
end

hs.status = "Progressing"
hs.message = "Waiting for the agentsession operator to check the policy"
return hs
